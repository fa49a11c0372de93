"""In-memory twins of the ports (``treadle.ports``), for tests of coordinator and supervisor logic that need
no broker, git or provider host. Each keeps the behaviours callers rely on; the contract suites
(``tests/integration/test_ports_contract_*.py``) run the same checks on a twin and on the real thing."""

from .archive import MemoryArchive
from .checkpoints import MemoryCheckpoints
from .eventlog import MemoryEventLog, StoredMessage, subject_matches
from .hosts import MemoryHosts
from .volumes import MemoryVolumes

__all__ = [
    "MemoryArchive",
    "MemoryCheckpoints",
    "MemoryEventLog",
    "MemoryHosts",
    "MemoryVolumes",
    "StoredMessage",
    "subject_matches",
]
