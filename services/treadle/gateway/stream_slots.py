"""Open SSE streams per token and per tenant, counted in this gateway process (each replica has its own
slots). A stream takes its slot before any broker subscription is opened and gives it back when it ends,
however it ends (the client went away, the server stops, the stream failed)."""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable

from .errors import ApiError


class StreamSlots:
    def __init__(self, per_token: int, per_tenant: int) -> None:
        self.per_token, self.per_tenant = per_token, per_tenant  # 0: no limit
        self._tokens: Counter[str] = Counter()
        self._tenants: Counter[str] = Counter()

    def open(self, token_id: str, tenant: str) -> None:
        """Takes a slot or raises the typed 429 saying which limit was hit."""
        for quota, limit, current in (
            ("streams_per_token", self.per_token, self._tokens[token_id]),
            ("streams_per_tenant", self.per_tenant, self._tenants[tenant]),
        ):
            if limit and current >= limit:
                raise ApiError(
                    429,
                    "quota_exceeded",
                    f"{current} event streams are open ({quota}); close one first",
                    {"quota": quota, "limit": limit, "current": current},
                    headers={"Retry-After": "1"},
                )
        self._tokens[token_id] += 1
        self._tenants[tenant] += 1

    def close(self, token_id: str, tenant: str) -> None:
        for counter, key in ((self._tokens, token_id), (self._tenants, tenant)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]

    def open_count(self, token_id: str | None = None, tenant: str | None = None) -> int:
        return self._tokens[token_id] if token_id is not None else self._tenants[tenant or ""]

    def held(self, token_id: str, tenant: str, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``stream`` with the slot (already taken) given back when it ends, is closed, or is dropped unstarted
        (a client gone before the first byte: an async generator never started runs no ``finally``)."""
        return _Held(stream, lambda: self.close(token_id, tenant))


class _Held:
    def __init__(self, stream: AsyncIterator[bytes], release: Callable[[], object]) -> None:
        self._stream = stream
        self._release = weakref.finalize(self, release)  # runs once: at the end, at aclose or when collected

    def __aiter__(self) -> _Held:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._stream.__anext__()
        except BaseException:  # the end, a failure, or the task cancelled because the client went away
            await self.aclose()
            raise

    async def aclose(self) -> None:
        try:
            aclose = getattr(self._stream, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            self._release()
