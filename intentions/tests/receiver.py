"""A tiny local webhook endpoint for outbox tests (test_engine, test_faults)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver(ThreadingHTTPServer):
    """Records each POST and answers with the next of `statuses` (200 when none).

    `arrived` is set on each request. The first `hang` requests are held until
    `release` is set (a slow receiver), then answered."""

    daemon_threads = True

    def __init__(self):
        self.received: list[tuple[dict, bytes]] = []
        self.statuses: list[int] = []
        self.hang = 0
        self.arrived = threading.Event()
        self.release = threading.Event()

        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                held = len(receiver.received) <= receiver.hang
                receiver.arrived.set()
                if held:
                    receiver.release.wait(timeout=60)
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def handle_error(self, request, client_address):
        pass  # a caller killed mid-request (the fault tests) closes the socket under us


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
