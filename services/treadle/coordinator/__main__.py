import contextlib

from nats.aio.client import Client as NATS

from treadle.runtime.settings import CoordinatorSettings, Shared
from treadle.runtime.worker import run, serve

from .service import Coordinator


async def main() -> None:
    shared, own = Shared(), CoordinatorSettings()

    async def make(nc: NATS, stack: contextlib.AsyncExitStack) -> Coordinator:
        return Coordinator(nc, shared, own)

    await serve("coordinator", shared, own, make)


if __name__ == "__main__":
    run(main)
