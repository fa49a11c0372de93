import contextlib

from nats.aio.client import Client as NATS

from treadle.providers.registry import check_model_urls
from treadle.runtime.settings import ProviderHostSettings, Shared
from treadle.runtime.worker import run, serve
from treadle.sandbox.host import SandboxSettings

from .service import ProviderHost


async def main() -> None:
    shared, own = Shared(), ProviderHostSettings()
    if SandboxSettings().mode == "on":
        check_model_urls()

    async def make(nc: NATS, stack: contextlib.AsyncExitStack) -> ProviderHost:
        return ProviderHost(nc, shared, own)

    await serve("provider-host", shared, own, make)


if __name__ == "__main__":
    run(main)
