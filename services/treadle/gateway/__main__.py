import uvicorn

from treadle.eventlog import tracing
from treadle.runtime import heap, logs
from treadle.runtime.settings import GatewaySettings, Shared

from .app import create_app


def main() -> None:
    shared, own = Shared(), GatewaySettings()
    logs.setup("gateway", shared.log_level, shared.log_format)
    tracing.setup("gateway")
    app = create_app(shared, own)
    app.on_startup.append(heap.settle)  # the process's, not the factory's: tests make many apps in one process
    # uvicorn owns SIGTERM here: it stops accepting, finishes in-flight requests, then runs the lifespan exit.
    uvicorn.run(
        app,
        host=own.host,
        port=own.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,  # ours (runtime/access_log.py) names the route template, tenant and request id
        log_config=None,  # uvicorn's lines go through the root handler, in our format (runtime/logs.py)
        timeout_graceful_shutdown=5,
    )
    tracing.shutdown()


if __name__ == "__main__":
    main()
