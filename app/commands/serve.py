"""``prime-train-tui serve [--host H] [--port N] [--public] [--max-sessions N] [--demo] [--pod POD ...]``: the TUI
in a browser.

The same app, served through textual-serve (the optional ``serve`` extra): each browser tab that opens the
page starts its own copy of the app (``python -m app.cli`` with the flags given here) and talks to it over a
websocket. Whoever can open the page drives the app with the user's keys: rents pods, launches and kills
runs. So it listens on 127.0.0.1 unless ``--public`` is given, and then says so on stderr; it answers only
requests addressed to its own names (a web page whose name an attacker points at 127.0.0.1 is refused), and
runs at most ``--max-sessions`` apps at once. Exit 2 on bad arguments or without the extra, 1 when the port
cannot be opened.
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
# each session is a whole app (its own connections, history, panes): about 70 MB apiece
DEFAULT_MAX_SESSIONS = 4


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the TUI in a browser (textual-serve) on 127.0.0.1",
        description="Serve the TUI to a web browser through textual-serve. Each browser tab "
        "runs its own copy of the app; whoever opens the page can drive it.",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; anything else needs --public)"
    )
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument(
        "--public",
        action="store_true",
        help="allow an address other machines can reach: anyone on the network can then "
        "drive the app (rent pods, kill runs)",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        metavar="N",
        help=f"how many browser tabs may run the app at once (default {DEFAULT_MAX_SESSIONS}; "
        "each is a whole copy of the app)",
    )
    p.add_argument(
        "--public-url",
        metavar="URL",
        help="the address browsers use, e.g. http://10.0.0.5:8000 (default http://HOST:PORT; "
        "needed with --host 0.0.0.0)",
    )
    # the app's own flags, under their own names: a subparser's defaults would overwrite the top-level ones
    p.add_argument(
        "--demo", dest="serve_demo", action="store_true", help="add an embedded SIMULATED pod (no pod, no keys needed)"
    )
    p.add_argument(
        "--pod",
        dest="serve_pods",
        action="append",
        default=[],
        metavar="POD",
        help="watch this pod too (repeatable), as for the TUI",
    )
    p.add_argument("--no-local", dest="serve_no_local", action="store_true", help="do not show this machine")
    p.add_argument(
        "--config", dest="serve_config", type=Path, metavar="FILE", help="a prime-rl TOML to open in the Config pane"
    )
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


def full_message(limit: int) -> str:
    """What a browser tab sees instead of the app when ``limit`` tabs already run it."""
    tabs = "one browser tab already has" if limit == 1 else f"{limit} browser tabs already have"
    return (
        f"\r\n  prime-train-tui: {tabs} the app open, the most this server runs at once.\r\n"
        "  Close one of them, then reload this page.\r\n"
    )


def _server_class() -> type:
    """textual-serve's Server, answering only requests addressed to its own names (``allowed_hosts``), from
    its own page (``allowed_origins``), running at most ``max_sessions`` apps, and closing the browsers'
    websockets as soon as it is told to stop (Ctrl+C, SIGTERM): each app then gets its "quit" and exits with
    its pods' connections. textual-serve itself leaves open websockets to aiohttp's shutdown timeout (a
    minute per open tab). Raises ImportError without the extra."""
    import asyncio

    from aiohttp import WSCloseCode, web
    from textual_serve.server import Server

    class AppServer(Server):
        def __init__(self, *args: Any, max_sessions: int = DEFAULT_MAX_SESSIONS, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.sockets: set[Any] = set()
            self.max_sessions = max_sessions
            self.sessions = 0
            self.hosts = allowed_hosts(self.host, self.port, self.public_url)

        async def _make_app(self) -> Any:
            app = await super()._make_app()
            app.middlewares.append(self._check_host)
            return app

        @web.middleware
        async def _check_host(self, request: Any, handler: Any) -> Any:
            # a web site can point its own name at 127.0.0.1 (DNS rebinding): the browser then treats this
            # server as that site, and its pages may read it and open its websocket. Their requests still
            # carry the site's name in Host, which is none of ours.
            if request.headers.get("Host", "").strip().lower() not in self.hosts:
                raise web.HTTPMisdirectedRequest(text="this server answers only to its own address")
            return await handler(request)

        async def handle_index(self, request: Any) -> Any:
            if self.sessions >= self.max_sessions:
                return web.Response(status=503, text=full_message(self.max_sessions).replace("\r", ""))
            return await super().handle_index(request)

        async def handle_websocket(self, request: Any) -> Any:
            # websockets ignore the same-origin policy: any site open in the browser could connect here
            origin = request.headers.get("Origin")
            if origin is not None and origin.lower() not in allowed_origins(self.hosts):
                raise web.HTTPForbidden(text="this page belongs to another site")
            if self.sessions >= self.max_sessions:
                return await self._refuse(request)
            self.sessions += 1  # before any await: two tabs opening at once cannot both take the last place
            try:
                return await super().handle_websocket(request)
            finally:
                self.sessions -= 1

        async def _refuse(self, request: Any) -> Any:
            """Tell the extra tab why, in its terminal, and start no app. The socket stays open until the tab
            goes: closing it would cover the message with the page's "Session ended"."""
            websocket = web.WebSocketResponse(heartbeat=15)
            await websocket.prepare(request)
            self.sockets.add(websocket)
            try:
                await websocket.send_bytes(full_message(self.max_sessions).encode())
                async for _ in websocket:
                    pass
            finally:
                self.sockets.discard(websocket)
            return websocket

        async def _process_messages(self, websocket: Any, app_service: Any) -> None:
            self.sockets.add(websocket)
            try:
                await super()._process_messages(websocket, app_service)
            finally:
                self.sockets.discard(websocket)

        async def on_shutdown(self, app: web.Application) -> None:  # aiohttp's application, not ours
            await asyncio.gather(
                *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"server stopped") for ws in list(self.sockets)),
                return_exceptions=True,
            )

    return AppServer


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def allowed_hosts(host: str, port: int, public_url: str) -> set[str]:
    """The Host headers the server answers (lower case): its own address and port, the ``public_url``'s and,
    when it listens on loopback, this machine's loopback names. Never a name from the request itself: a
    rebound DNS name reaches 127.0.0.1 too."""
    from urllib.parse import urlsplit

    def forms(name: str, port: int, scheme: str) -> set[str]:
        default = {"http": 80, "https": 443}.get(scheme)
        return {f"{name}:{port}"} | ({name} if port == default else set())

    bound = host.strip().lower()
    hosts = forms(f"[{bound}]" if ":" in bound else bound, port, "http")
    if is_loopback(bound) or bound in ("0.0.0.0", "::", ""):
        for name in LOOPBACK_NAMES:
            hosts |= forms(name, port, "http")
    url = urlsplit(public_url)
    try:
        url_port = url.port
    except ValueError:
        url_port = None
    if url.hostname:
        name = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
        hosts |= forms(name.lower(), url_port or (443 if url.scheme == "https" else 80), url.scheme)
    return hosts


def allowed_origins(hosts: set[str]) -> set[str]:
    """The pages that may open the app's websocket: the served page itself, under any of the server's own
    names (``allowed_hosts``)."""
    return {f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")}


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
    if args.max_sessions < 1:
        return fail(
            f"--max-sessions {args.max_sessions} would let no browser in",
            f"use 1 or more, e.g. --max-sessions {DEFAULT_MAX_SESSIONS}",
            EXIT_USAGE,
        )
    public_url = args.public_url
    if not is_loopback(host):
        if not args.public:
            return fail(
                f"refusing to serve on {host}: anyone who can reach it could drive the app (rent pods, kill runs)",
                "serve on 127.0.0.1 and use `ssh -L`, or pass --public if you mean it",
                EXIT_USAGE,
            )
        if public_url is None and host in ("0.0.0.0", "::"):
            return fail(
                f"--host {host} listens on every address: the browser needs one of them",
                f"add --public-url http://<this machine's address>:{port}",
                EXIT_USAGE,
            )
    try:
        Server = _server_class()
    except ImportError:
        return fail(MISSING_EXTRA, code=EXIT_USAGE)
    if not is_loopback(host):
        print(
            f"prime-train-tui: warning: serving on {host}:{port} with no login: anyone on the network "
            "who can reach it can drive the app, rent pods and kill runs",
            file=sys.stderr,
        )
    if public_url is None and ":" in host:  # an IPv6 literal needs brackets in a URL
        public_url = f"http://[{host}]:{port}"
    if hasattr(sys.stdout, "reconfigure"):  # textual-serve logs an app's stderr there: now, not at exit
        sys.stdout.reconfigure(line_buffering=True)
    server = Server(
        app_command(args),
        host=host,
        port=port,
        title="prime-train-tui",
        public_url=public_url,
        max_sessions=args.max_sessions,
    )
    try:
        server.serve()
    except OSError as exc:  # the port is taken, the address is not this machine's, ...
        hint = (
            "pick another --port (or stop what holds this one)"
            if exc.errno == errno.EADDRINUSE
            else "--host must be an address of this machine"
        )
        return fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}", hint, EXIT_FAIL)
    return EXIT_OK
