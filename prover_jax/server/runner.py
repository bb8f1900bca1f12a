"""Running a server in-process: uvicorn in a daemon thread, started and stopped by a context.

The listening socket is bound before uvicorn starts, so port 0 (the default) gets a free port
from the operating system with no race, and the base URL is known when the context opens.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn

from prover_jax.server.app import create_app
from prover_jax.server.backend import Backend

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 10.0
# A request still in a backend (a scripted slow reply) must not hold shutdown up for long.
GRACEFUL_SHUTDOWN_S = 5


@contextlib.contextmanager
def serve(backend: Backend, host: str = LOOPBACK, port: int = 0) -> Iterator[str]:
    """Serves ``backend`` on ``host:port`` while the context is open.

    Args:
      backend: answers the chat-completions requests.
      host: interface to bind; loopback unless told otherwise.
      port: TCP port; 0 picks a free one.

    Yields:
      The base URL for the ``openai`` client, e.g. ``http://127.0.0.1:41234/v1``.
    """
    with serve_app(create_app(backend), host, port, "openai-server") as url:
        yield f"{url}/v1"


@contextlib.contextmanager
def serve_app(app, host: str = LOOPBACK, port: int = 0, name: str = "server") -> Iterator[str]:
    """Serves the ASGI application ``app`` on ``host:port`` (0: a free port) while the
    context is open; yields its base URL, e.g. ``http://127.0.0.1:41234``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(app, log_level="warning", access_log=False,
                            lifespan="off", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"{name}-{sock.getsockname()[1]}")
    thread.start()
    try:
        _wait_started(server, thread, name)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def _wait_started(server: uvicorn.Server, thread: threading.Thread, name: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        raise RuntimeError(f"the {name} did not start")
