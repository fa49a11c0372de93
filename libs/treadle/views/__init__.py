"""The read contract: the documents the HTTP API serves, as msgspec Structs apart from the domain's state.

Every view carries ``view_version`` (a class attribute, not a JSON field): the projection store keeps the
version beside each stored document and treats a document of another version as missing, so bumping
``VIEW_VERSION`` makes every thread's views be folded again from the log. Only ``of_state`` knows the domain.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec

VIEW_VERSION = 9  # bump on any change to a view's JSON or its places: stored documents of another version are rebuilt


class View(msgspec.Struct, kw_only=True):
    view_version: ClassVar[int] = VIEW_VERSION
