import contextlib

from nats.aio.client import Client as NATS

from treadle.projections.connect import redis_client
from treadle.runtime.settings import ProjectorSettings, Shared
from treadle.runtime.worker import run, serve

from .service import Projector


async def main() -> None:
    shared, own = Shared(), ProjectorSettings()

    async def make(nc: NATS, stack: contextlib.AsyncExitStack) -> Projector:
        redis = redis_client(shared.redis_url)
        stack.push_async_callback(redis.aclose)
        return Projector(nc, redis, own, shared)

    await serve("projector", shared, own, make)


if __name__ == "__main__":
    run(main)
