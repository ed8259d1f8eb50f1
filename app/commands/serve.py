"""``prime-train-tui serve [--host H] [--port N] [--public] [--demo] [--pod POD ...]``: the TUI in a browser.

The same app, served through textual-serve (the optional ``serve`` extra): each browser tab that opens the
page starts its own copy of the app (``python -m app.cli`` with the flags given here) and talks to it over a
websocket. Whoever can open the page drives the app with the user's keys: rents pods, launches and kills
runs. So it listens on 127.0.0.1 unless ``--public`` is given, and then says so on stderr. Exit 2 on bad
arguments or without the extra, 1 when the port cannot be opened.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import shlex
import sys
from pathlib import Path
from typing import Any

from app.commands._support import EXIT_FAIL, EXIT_OK, EXIT_USAGE, fail

MISSING_EXTRA = "the browser view needs the 'serve' extra: pip install 'prime-train-tui[serve]'"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the TUI in a browser (textual-serve) on 127.0.0.1",
                       description="Serve the TUI to a web browser through textual-serve. Each browser tab "
                                   "runs its own copy of the app; whoever opens the page can drive it.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; anything else needs --public)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--public", action="store_true",
                   help="allow an address other machines can reach: anyone on the network can then "
                        "drive the app (rent pods, kill runs)")
    p.add_argument("--public-url", metavar="URL",
                   help="the address browsers use, e.g. http://10.0.0.5:8000 (default http://HOST:PORT; "
                        "needed with --host 0.0.0.0)")
    # the app's own flags, under their own names: a subparser's defaults would overwrite the top-level ones
    p.add_argument("--demo", dest="serve_demo", action="store_true",
                   help="add an embedded SIMULATED pod (no pod, no keys needed)")
    p.add_argument("--pod", dest="serve_pods", action="append", default=[], metavar="POD",
                   help="watch this pod too (repeatable), as for the TUI")
    p.add_argument("--no-local", dest="serve_no_local", action="store_true", help="do not show this machine")
    p.add_argument("--config", dest="serve_config", type=Path, metavar="FILE",
                   help="a prime-rl TOML to open in the Config pane")
    p.set_defaults(func=run)


def app_command(args: argparse.Namespace) -> str:
    """The shell command textual-serve runs per browser tab: this app with the TUI's flags (given before or
    after ``serve``). ``exec`` so the app is the server's own child, not a shell's."""
    argv = [sys.executable, "-m", "app.cli"]
    if args.demo or args.serve_demo:
        argv.append("--demo")
    for spec in [*args.pod, *args.serve_pods]:
        argv += ["--pod", spec]
    if args.no_local or args.serve_no_local:
        argv.append("--no-local")
    config = args.serve_config or args.config
    if config is not None:
        argv += ["--config", str(config.expanduser().resolve())]
    return "exec " + shlex.join(argv)


def _server_class() -> type:
    """textual-serve's Server, closing the browsers' websockets as soon as it is told to stop (Ctrl+C,
    SIGTERM): each app then gets its "quit" and exits with its pods' connections. textual-serve itself leaves
    open websockets to aiohttp's shutdown timeout (a minute per open tab). Raises ImportError without the
    extra."""
    import asyncio

    from aiohttp import WSCloseCode, web
    from textual_serve.server import Server

    class AppServer(Server):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.sockets: set[Any] = set()

        async def handle_websocket(self, request: Any) -> Any:
            # websockets ignore the same-origin policy: any site open in the browser could connect here
            origin = request.headers.get("Origin")
            if origin is not None and origin not in allowed_origins(self.public_url, request.host, self.port):
                raise web.HTTPForbidden(text="this page belongs to another site")
            return await super().handle_websocket(request)

        async def _process_messages(self, websocket: Any, app_service: Any) -> None:
            self.sockets.add(websocket)
            try:
                await super()._process_messages(websocket, app_service)
            finally:
                self.sockets.discard(websocket)

        async def on_shutdown(self, app: Any) -> None:
            await asyncio.gather(*(ws.close(code=WSCloseCode.GOING_AWAY, message=b"server stopped")
                                   for ws in list(self.sockets)), return_exceptions=True)

    return AppServer


def allowed_origins(public_url: str, host_header: str, port: int) -> set[str]:
    """The pages that may open the app's websocket: the served page itself, under the URL it was served as
    (``public_url``, the request's Host) or, on this machine, any loopback name for the port."""
    from urllib.parse import urlsplit

    url = urlsplit(public_url)
    origins = {f"{url.scheme}://{url.netloc}", f"http://{host_header}", f"https://{host_header}"}
    if is_loopback(url.hostname or ""):
        origins |= {f"http://{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")}
    return origins


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    host, port = args.host.strip(), args.port
    if not 1 <= port <= 65535:
        return fail(f"--port {port} is not a port", "use 1-65535, e.g. --port 8000", EXIT_USAGE)
    if not host:
        return fail("--host is empty", "leave it out to serve on 127.0.0.1", EXIT_USAGE)
    public_url = args.public_url
    if not is_loopback(host):
        if not args.public:
            return fail(f"refusing to serve on {host}: anyone who can reach it could drive the app "
                        "(rent pods, kill runs)",
                        "serve on 127.0.0.1 and use `ssh -L`, or pass --public if you mean it", EXIT_USAGE)
        if public_url is None and host in ("0.0.0.0", "::"):
            return fail(f"--host {host} listens on every address: the browser needs one of them",
                        f"add --public-url http://<this machine's address>:{port}", EXIT_USAGE)
    try:
        Server = _server_class()
    except ImportError:
        return fail(MISSING_EXTRA, code=EXIT_USAGE)
    if not is_loopback(host):
        print(f"prime-train-tui: warning: serving on {host}:{port} with no login: anyone on the network "
              "who can reach it can drive the app, rent pods and kill runs", file=sys.stderr)
    if public_url is None and ":" in host:  # an IPv6 literal needs brackets in a URL
        public_url = f"http://[{host}]:{port}"
    if hasattr(sys.stdout, "reconfigure"):  # textual-serve logs an app's stderr there: now, not at exit
        sys.stdout.reconfigure(line_buffering=True)
    server = Server(app_command(args), host=host, port=port, title="prime-train-tui", public_url=public_url)
    try:
        server.serve()
    except OSError as exc:  # the port is taken, the address is not this machine's, ...
        hint = ("pick another --port (or stop what holds this one)" if exc.errno == errno.EADDRINUSE
                else "--host must be an address of this machine")
        return fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}", hint, EXIT_FAIL)
    return EXIT_OK
