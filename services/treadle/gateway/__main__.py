import uvicorn

from treadle.eventlog import tracing
from treadle.runtime import logs
from treadle.runtime.settings import GatewaySettings, Shared

from .app import create_app


def main() -> None:
    shared, own = Shared(), GatewaySettings()
    logs.setup("gateway", shared.log_level, shared.log_format)
    tracing.setup("gateway")
    # uvicorn owns SIGTERM here: it stops accepting, finishes in-flight requests, then runs the lifespan exit.
    uvicorn.run(
        create_app(shared, own),
        host=own.host,
        port=own.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    tracing.shutdown()


if __name__ == "__main__":
    main()
