"""The orchestrator's MCP server (issue 21) at ``/mcp``: the thread tools over Streamable HTTP, for a user's own
MCP client with an ordinary bearer token (scoped to its tenant). ``ROUTES`` mounts it; ``lifespan`` runs it."""

from .mount import ROUTES, lifespan

__all__ = ["ROUTES", "lifespan"]
