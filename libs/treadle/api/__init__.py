"""The public contract of the HTTP API, once: the request bodies and the receipts of the write routes, as msgspec
Structs whose limits are their field types' constraints (``core.limits``) and whose choices are ``Literal``s.
The gateway decodes its bodies into them, the MCP tools build them from their arguments
(``usecases.arguments.parse``), and the SDK decodes the receipts into them; the OpenAPI document is generated
from them. Pure (stdlib and msgspec), below the core: the core's commands use the same field types, and the SDK
imports this package without anything of the server."""

from treadle.api.lineage import ForkBody, Forked, ForkSourceBody
from treadle.api.messages import MessageAccepted, SendMessageRequest
from treadle.api.plans import ImplementBody, Implemented
from treadle.api.queue import EditBody, ReorderBody
from treadle.api.requests import RespondBody
from treadle.api.rollbacks import NodeRollbackRequest, RollbackRequest
from treadle.api.runs import Acknowledged, InterruptRequest
from treadle.api.threads import CreateThreadRequest, ThreadCreated, ThreadDeleted, ThreadUpdated, UpdateThreadRequest

__all__ = [
    "Acknowledged",
    "CreateThreadRequest",
    "EditBody",
    "ForkBody",
    "ForkSourceBody",
    "Forked",
    "ImplementBody",
    "Implemented",
    "InterruptRequest",
    "MessageAccepted",
    "NodeRollbackRequest",
    "ReorderBody",
    "RespondBody",
    "RollbackRequest",
    "SendMessageRequest",
    "ThreadCreated",
    "ThreadDeleted",
    "ThreadUpdated",
    "UpdateThreadRequest",
]
