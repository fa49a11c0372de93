import contextlib

from nats.aio.client import Client as NATS

from treadle.checkpoints.archive import JetStreamArchive
from treadle.checkpoints.git import Workspaces
from treadle.runtime.settings import CheckpointsSettings, Shared
from treadle.runtime.worker import run, serve

from .service import CheckpointService


async def main() -> None:
    shared, own = Shared(), CheckpointsSettings()

    async def make(nc: NATS, stack: contextlib.AsyncExitStack) -> CheckpointService:
        workspaces = Workspaces(
            shared.workspaces,
            (shared.state_dir / "shadow").resolve(),
            watch=own.watch,
            max_file_bytes=own.max_file_bytes,
            run_as_tenant=own.run_as_tenant,
            archive=JetStreamArchive(nc.jetstream(), timeout=own.archive_timeout) if own.durable else None,
        )
        return CheckpointService(nc, workspaces, shared.volume, retention=own, announce=shared.workspaces)

    await serve("checkpoints", shared, own, make)


if __name__ == "__main__":
    run(main)
