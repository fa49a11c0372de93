"""Issue 35 in the HTTP tests: wait until a provider thread's native state is kept off the node (the host stores
it after the turn has reported its end, so a node lost at once may lose the last turn's)."""

from __future__ import annotations

import nats

from tests.support.helpers import wait_for
from treadle.checkpoints.archive import JetStreamArchive
from treadle.cli.stack import Stack
from treadle.provider_host.native_states import NativeStates, object_name


async def kept(stack: Stack, tenant: str, provider: str, provider_thread_id: str, holding: str) -> None:
    """Returns once the kept state of the provider thread holds ``holding`` (in one of its files, as a restore
    would give them back)."""
    nc = await nats.connect(stack.nats_url)
    try:
        keeper = NativeStates(JetStreamArchive(nc.jetstream()))
        name = object_name(tenant, provider, provider_thread_id)

        async def there() -> bool:
            files = await keeper.fetch(name)
            return files is not None and any(holding.encode() in v for v in files.values())

        await wait_for(there, timeout=30, interval=0.1, what=f"the native state of {provider_thread_id} kept")
    finally:
        await nc.close()
