"""The generic Agent Client Protocol provider: any ACP agent configured by name (issue 22)."""

from .adapter import AcpAdapter
from .settings import AcpAgent, AcpSettings

__all__ = ["AcpAdapter", "AcpAgent", "AcpSettings"]
