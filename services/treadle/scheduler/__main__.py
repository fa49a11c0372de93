import contextlib

from nats.aio.client import Client as NATS

from treadle.runtime.settings import SchedulerSettings, Shared
from treadle.runtime.worker import run, serve

from .service import Scheduler


async def main() -> None:
    shared, own = Shared(), SchedulerSettings()

    async def make(nc: NATS, stack: contextlib.AsyncExitStack) -> Scheduler:
        return Scheduler(nc, own, shared)

    await serve("scheduler", shared, own, make)


if __name__ == "__main__":
    run(main)
