"""Issue 35 in the HTTP tests: wait until a provider thread's native state is kept off the node (the host stores
it after the turn has reported its end, so a node lost at once may lose the last turn's)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import nats

from tests.support.helpers import wait_for
from treadle.checkpoints.archive import JetStreamArchive
from treadle.cli.stack import Stack
from treadle.provider_host.native_states import NativeStates, object_name


async def kept(
    stack: Stack,
    tenant: str,
    provider: str,
    provider_thread_id: str,
    holding: str,
    where: Callable[[str], bool] = lambda name: True,
) -> dict[str, bytes]:
    """Returns the kept files of the provider thread once one of them that ``where`` takes (by name) holds
    ``holding``, as a restore would give them back."""
    nc = await nats.connect(stack.nats_url)
    try:
        keeper = NativeStates(JetStreamArchive(nc.jetstream()))
        name = object_name(tenant, provider, provider_thread_id)

        async def there() -> dict[str, bytes] | None:
            files = await keeper.fetch(name)
            found = files is not None and any(holding.encode() in v for k, v in files.items() if where(k))
            return files if found else None

        return await wait_for(there, timeout=30, interval=0.1, what=f"the native state of {provider_thread_id} kept")
    finally:
        await nc.close()


async def lose_the_node(stack: Stack, homes: Path) -> None:
    """The host's node is lost: its host and runtimes die at once and ``homes`` (what its disk held of the
    runtimes' own state) goes with it; a new host starts on an empty disk."""
    await stack.processes.halt("provider-host")
    shutil.rmtree(homes)
    await stack.processes.start()
    await stack.wait_ready(names=["provider-host"])
