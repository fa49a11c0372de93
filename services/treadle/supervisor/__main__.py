import contextlib

from nats.aio.client import Client as NATS

from treadle.runtime.settings import Shared, SupervisorSettings
from treadle.runtime.worker import run, serve

from .service import Supervisor


async def main() -> None:
    shared, own = Shared(), SupervisorSettings()

    async def make(nc: NATS, stack: contextlib.AsyncExitStack) -> Supervisor:
        return Supervisor(nc, shared, own)

    await serve("supervisor", shared, own, make)


if __name__ == "__main__":
    run(main)
