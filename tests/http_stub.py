"""A real HTTP server on 127.0.0.1 for the CLI tests of the providers' APIs (the CLI runs its own httpx client,
so a MockTransport cannot reach it): every request is answered by a plain function of the test's."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (method, path) -> (status, body) or (status, body, content type): a bytes body is sent as it is, anything
# else as JSON; the content type defaults to application/json
Answer = Callable[[str, str], "tuple[Any, ...]"]

# HTTP/1.1 with keep-alive, as the providers' APIs speak it. The request's body is always read: a server
# that closes with an unread POST body in its socket resets the connection (TCP RST), and the client's
# concurrent requests (Vast's two searches) then failed with ReadError in ~5 % of runs.
PROTOCOL = "HTTP/1.1"


@contextmanager
def serve(answer: Answer, bodies: list[tuple[str, str, Any]] | None = None) -> Iterator[str]:
    """Serve ``answer`` until the block ends; yields the base URL (``http://127.0.0.1:<port>``). ``bodies``: each
    request that carried a body appends (method, path, its JSON, or its bytes when it is not JSON)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:  # read the request's body: on a kept-alive connection it would be taken for the next request
                raw = self.rfile.read(length)
                if bodies is not None:
                    try:
                        bodies.append((self.command, self.path, json.loads(raw)))
                    except ValueError:
                        bodies.append((self.command, self.path, raw))
            status, body, *kind = answer(self.command, self.path)
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", kind[0] if kind else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:
            pass

    Handler.protocol_version = PROTOCOL
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def first_segment(path: str) -> str:
    """ "/prime/availability/gpus?page=1" -> "/prime": the route the tests key their answers by."""
    return "/" + path.lstrip("/").split("/", 1)[0]
