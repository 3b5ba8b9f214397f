"""A loopback HTTP server run in a background thread: shared by the target and the model stub."""

from __future__ import annotations

import threading
from http.server import HTTPServer


def serve_in_thread(server: HTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)  # fmt: skip
    thread.start()
    return thread


def shut_down(server: HTTPServer | None, thread: threading.Thread | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()
    if thread is not None:
        thread.join(timeout=5)
