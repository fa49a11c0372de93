import contextlib

from nats.aio.client import Client as NATS

from treadle.runtime.settings import Shared, WebhooksSettings
from treadle.runtime.worker import run, serve

from .service import Deliveries


async def main() -> None:
    shared, own = Shared(), WebhooksSettings()

    async def make(nc: NATS, stack: contextlib.AsyncExitStack) -> Deliveries:
        return Deliveries(nc, own, shared)

    await serve("webhooks", shared, own, make)


if __name__ == "__main__":
    run(main)
