"""A webhook receiver on 127.0.0.1 for the push tests: every POST's JSON body is kept, in order (apprise's
``json://127.0.0.1:PORT/path`` posts ``{"version", "title", "message", "type", "attachments"}``)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self, port: int, status: int = 200) -> None:
        self.port, self.status = port, status
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.times: list[float] = []  # time.monotonic() of each post
        self._lock = threading.Lock()

    def url(self, path: str = "hook") -> str:
        return f"json://127.0.0.1:{self.port}/{path}"

    def add(self, path: str, body: dict[str, Any]) -> None:
        with self._lock:
            self.posts.append((path, body))
            self.times.append(time.monotonic())

    @property
    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return [b for _, b in self.posts]

    def wait_for(self, test: Callable[[list[dict[str, Any]]], bool], timeout: float = 20.0, what: str = "") -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if test(self.bodies):
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what or 'messages'}; got {self.bodies}")


@contextmanager
def receiver(status: int = 200) -> Iterator[Receiver]:
    box: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(data)
            except ValueError:
                body = {"raw": data.decode(errors="replace")}
            box[0].add(self.path, body)
            self.send_response(box[0].status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.append(Receiver(server.server_address[1], status))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield box[0]
    finally:
        server.shutdown()
        server.server_close()
