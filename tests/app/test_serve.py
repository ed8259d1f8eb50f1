"""``prime-train-tui serve``: the real server, the real app per tab, a real headless Chromium.

The served page draws the terminal on a canvas (xterm.js), so the app's text is read where it reaches the
browser: the websocket frames Chromium received, through the DevTools protocol (aiohttp, which the serve
extra brings, is the protocol's client). The screenshot is taken from the same page once the app drew.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from app.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# the demo's Monitor pane: its tab, the pod's label, its GPUs table and the run's progress line
MONITOR_WORDS = ("Monitor", "demo", "SIMULATED", "GPUs: 8", "NVIDIA H100", "run: step")
SPLASH = (bytes.fromhex("0c181f"), bytes.fromhex("12232d"))  # textual-serve's page before the app's bytes
ANSI = re.compile(rb"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing answered on 127.0.0.1:{port}")


def end_tree(proc: subprocess.Popen) -> None:
    """SIGTERM ``proc`` (it started in a session of its own) and everything under it, SIGKILL what is left."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=5)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # a grandchild that was reparented still holds the group
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=5)


def png_colours(data: bytes) -> Counter[bytes]:
    """How often each RGB(A) colour occurs in an 8-bit RGB/RGBA PNG (every 4th pixel of each row), decoded
    with the standard library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour_type in (2, 6), (depth, colour_type)
            bpp = 3 if colour_type == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * bpp
    prev, colours = bytearray(stride), Counter()
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        colours.update(bytes(line[i : i + 3]) for i in range(0, stride, bpp * 4))
        prev = line
    return colours


@dataclass
class Served:
    screen_text: str  # what the app sent the browser, escape sequences stripped
    screenshot: Path
    page_classes: str  # the page's <body> classes ("-first-byte" once the app's bytes arrived)
    server_log: str
    stopped: Stopped
    foreign_origin_status: int  # the websocket handshake's answer to a page from another site
    guarded: Guarded


@dataclass
class Guarded:
    """What the server answered to requests under a name that is not its own, and past its session cap
    (``--max-sessions 2``, the browser's tab holding one)."""

    rebound_page: int  # GET / with Host: attacker.example:PORT (DNS rebinding)
    rebound_socket: int  # its websocket handshake, Origin: http://attacker.example:PORT
    apps_after_rebound: int  # the apps running then: only the browser's
    localhost_page: int  # GET / under localhost:PORT
    localhost_socket: int  # the handshake from http://localhost:PORT (the second session)
    apps_at_cap: int  # the apps running with two sessions open
    full_page: tuple[int, str]  # GET / with both places taken
    full_socket: tuple[int, str]  # a third tab's handshake and the first bytes it got
    apps_after_full: int  # no app started for it
    reopened: bool  # a tab after one closed gets an app again


@dataclass
class Stopped:
    processes: list[str]  # the server's descendants (the app, its demo pod) before SIGTERM
    left: list[str]  # those still running 15 s after it
    exit_code: int | None


async def browse(devtools_port: int, url: str, shot: Path, deadline: float) -> tuple[str, str]:
    """Open ``url`` in Chromium's page, collect the websocket frames it receives until the Monitor pane's
    content arrived and the page showed it, then screenshot it. Returns (frames' text, body classes)."""
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{devtools_port}/json/list") as r:
            page = next(t for t in await r.json() if t["type"] == "page")
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            ids = iter(range(1, 10**6))
            frames = bytearray()
            replies: dict[int, dict] = {}

            async def call(method: str, **params) -> dict:
                n = next(ids)
                await ws.send_json({"id": n, "method": method, "params": params})
                while n not in replies:
                    await pump(deadline - time.monotonic())
                return replies.pop(n)

            async def pump(timeout: float) -> None:
                if timeout <= 0:
                    raise AssertionError(f"the page did not show the app in time; it got {text()[-800:]!r}")
                try:
                    msg = json.loads((await ws.receive(timeout=timeout)).data)
                except asyncio.TimeoutError:
                    return  # a quiet second: the caller looks again (until the deadline)
                if "id" in msg:
                    replies[msg["id"]] = msg
                elif msg.get("method") == "Network.webSocketFrameReceived":
                    resp = msg["params"]["response"]
                    payload = resp["payloadData"]
                    frames.extend(base64.b64decode(payload) if resp["opcode"] == 2 else payload.encode())

            def text() -> str:
                return ANSI.sub(b"", bytes(frames)).decode("utf-8", "replace")

            await call("Network.enable")
            await call("Page.enable")
            await call("Page.navigate", url=url)
            # the Monitor pane on the demo: its GPUs table and the run's progress, beside the pane tabs
            while not all(word in text() for word in MONITOR_WORDS):
                await pump(min(1.0, deadline - time.monotonic()))
            await asyncio.sleep(1.5)  # the page fades the terminal in (0.3 s) and xterm paints per frame
            classes = (await call("Runtime.evaluate", expression="document.body.className"))["result"]
            shot_reply = await call("Page.captureScreenshot", format="png")
            shot.write_bytes(base64.b64decode(shot_reply["result"]["data"]))
            return text(), classes["result"].get("value", "")


async def websocket_status(port: int, origin: str) -> int:
    """The HTTP status of a websocket handshake on /ws sent as a page from ``origin`` would (101: the app
    starts)."""
    import aiohttp

    async with aiohttp.ClientSession() as http:
        try:
            async with http.ws_connect(
                f"http://127.0.0.1:{port}/ws?width=80&height=24", headers={"Origin": origin}
            ) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


def served_apps(server_pid: int) -> int:
    """The apps the server runs now, one per session (its own children)."""
    try:
        return sum("app.cli" in " ".join(p.cmdline()) for p in psutil.Process(server_pid).children())
    except psutil.NoSuchProcess:
        return 0


async def guard_checks(port: int, server_pid: int, step_s: float) -> Guarded:
    """Each wait below has its own ``step_s`` bound: an app starts or ends several times here, and on a loaded
    machine their sum, not any one of them, outgrew a single shared deadline (CI's failure)."""
    import aiohttp

    async def until(ok, what: str) -> None:
        deadline = time.monotonic() + step_s
        while not ok():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.1)

    async def page(http, host: str) -> tuple[int, str]:
        async with http.get(f"http://127.0.0.1:{port}/", headers={"Host": host}) as r:
            return r.status, await r.text()

    async def handshake(http, host: str, origin: str) -> int:
        try:
            async with http.ws_connect(
                f"http://127.0.0.1:{port}/ws?width=80&height=24", headers={"Host": host, "Origin": origin}
            ):
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status

    async def first_bytes(ws) -> bytes:
        while True:
            msg = await ws.receive(timeout=step_s)
            if msg.type == aiohttp.WSMsgType.BINARY:
                return msg.data
            assert msg.type == aiohttp.WSMsgType.TEXT, msg

    local, rebound = f"localhost:{port}", f"attacker.example:{port}"
    async with aiohttp.ClientSession() as http:
        rebound_page = (await page(http, rebound))[0]
        rebound_socket = await handshake(http, rebound, f"http://{rebound}")
        await asyncio.sleep(0.5)  # an app it had started would be running by now
        apps_after_rebound = served_apps(server_pid)
        localhost_page = (await page(http, local))[0]
        ws_url = f"http://127.0.0.1:{port}/ws?width=80&height=24"
        async with http.ws_connect(ws_url, headers={"Host": local, "Origin": f"http://{local}"}) as second:
            await first_bytes(second)  # the app's first output: it runs
            await until(lambda: served_apps(server_pid) == 2, "the second session's app did not start")
            apps_at_cap = served_apps(server_pid)
            full_page = await page(http, f"127.0.0.1:{port}")
            async with http.ws_connect(ws_url, headers={"Origin": f"http://127.0.0.1:{port}"}) as third:
                full_socket = (101, (await first_bytes(third)).decode("utf-8", "replace"))
                await asyncio.sleep(0.5)
                apps_after_full = served_apps(server_pid)
        await until(lambda: served_apps(server_pid) == 1, "the closed session's app did not end")
        async with http.ws_connect(ws_url, headers={"Origin": f"http://127.0.0.1:{port}"}) as again:
            reopened = b"prime-train-tui:" not in await first_bytes(again)
            await until(lambda: served_apps(server_pid) == 2, "no app for the tab after one closed")
        await until(lambda: served_apps(server_pid) == 1, "the reopened session's app did not end")
    return Guarded(
        rebound_page,
        rebound_socket,
        apps_after_rebound,
        localhost_page,
        101,
        apps_at_cap,
        full_page,
        full_socket,
        apps_after_full,
        reopened,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Served:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run scripts/test.sh (it installs chromium)")
    root = tmp_path_factory.mktemp("serve")
    env = {
        **os.environ,
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(root / "config"),
        "PRIME_TRAIN_TUI_DATA_DIR": str(root / "data"),
        "PRIME_TRAIN_TUI_CACHE_DIR": str(root / "cache"),
    }
    port, log_path = free_port(), root / "server.log"
    with log_path.open("wb") as log_file:  # a file, not a pipe: nobody reads a pipe while the page loads
        server = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--demo", "--port", str(port), "--max-sessions", "2"],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    browser, failure = None, None
    try:
        # each step has its own bound (server, browser, page): under a loaded suite their sum varies the most
        wait_for_port(port, server, time.monotonic() + 25)
        deadline = time.monotonic() + 25
        profile = root / "chromium"
        browser = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--window-size=1280,800",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-dev-shm-usage",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        active = profile / "DevToolsActivePort"
        while not (active.exists() and active.read_text().strip()):
            assert browser.poll() is None, f"chromium exited ({browser.returncode})"
            assert time.monotonic() < deadline, "chromium never opened its DevTools port"
            time.sleep(0.1)
        shot = root / "monitor.png"
        deadline = time.monotonic() + 40
        screen_text, classes = asyncio.run(
            browse(int(active.read_text().split()[0]), f"http://127.0.0.1:{port}/", shot, deadline)
        )
        refused = asyncio.run(websocket_status(port, origin="http://evil.example"))
        guarded = asyncio.run(guard_checks(port, server.pid, step_s=30))
        # stopping the server (Ctrl+C, SIGTERM) with the tab still open ends the apps it started, and theirs
        family = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
        apps = [" ".join(p.cmdline()) for p in family[1:]]
        server.send_signal(signal.SIGTERM)
        _, left = psutil.wait_procs(family, timeout=15)
        stopped = Stopped(apps, [" ".join(p.cmdline()) for p in left], server.poll())
    except Exception as exc:  # noqa: BLE001 - kept and raised after the browser is ended
        failure = exc
    finally:
        if browser is not None:
            end_tree(browser)
        end_tree(server)
    log = log_path.read_text("utf-8", "replace")  # the server's log and its apps' stderr
    if failure is not None:
        raise AssertionError(f"{failure}\n--- the server's log ---\n{log[-4000:]}") from failure
    return Served(screen_text, shot, classes, log, stopped, refused, guarded)


def test_the_browser_shows_the_monitor_pane_of_the_demo(served):
    for word in MONITOR_WORDS:
        assert word in served.screen_text, word
    assert "-first-byte" in served.page_classes  # the page swapped its splash for the terminal
    colours = png_colours(served.screenshot.read_bytes())
    # not blank, and not the splash page (two flat colours, 99% of it): the app's tabs, tables and bars
    splash_share = sum(colours[c] for c in SPLASH) / sum(colours.values())
    assert len(colours) > 40 and splash_share < 0.1, (len(colours), splash_share)
    assert "Serving" in served.server_log and "app.cli --demo" in served.server_log


def test_stopping_the_server_ends_the_apps_it_started(served):
    assert any("app.cli --demo" in cmd for cmd in served.stopped.processes), served.stopped.processes
    assert served.stopped.left == [] and served.stopped.exit_code == 0


def test_a_page_from_another_site_cannot_drive_the_app(served):
    # websockets ignore the same-origin policy: without this, any site open in the browser could connect to
    # ws://127.0.0.1:8000/ws and type into the app (rent pods, kill runs)
    assert served.foreign_origin_status == 403


def test_a_page_under_another_name_gets_nothing(served):
    # DNS rebinding: attacker.example resolves to 127.0.0.1, so the browser sends the attacker's page here
    # and lets it open the websocket "of its own site"; only the Host header still names the attacker
    assert served.guarded.rebound_page == 421
    assert served.guarded.rebound_socket == 421
    assert served.guarded.apps_after_rebound == 1  # the browser's tab only


def test_the_page_and_its_websocket_under_localhost_are_served(served):
    assert served.guarded.localhost_page == 200
    assert served.guarded.localhost_socket == 101 and served.guarded.apps_at_cap == 2


def test_a_tab_past_the_session_cap_is_told_why_and_starts_no_app(served):
    status, text = served.guarded.full_page
    assert status == 503 and "2 browser tabs already have the app open" in text
    status, text = served.guarded.full_socket
    assert status == 101 and "2 browser tabs already have the app open" in text and "reload" in text
    assert served.guarded.apps_after_full == 2
    assert served.guarded.reopened  # a place freed by a closed tab is taken again


def test_the_session_cap_must_let_someone_in(capsys):
    assert main(["serve", "--max-sessions", "0"]) == 2
    assert "--max-sessions 0 would let no browser in" in capsys.readouterr().err


def test_the_served_command_is_this_app_with_the_tuis_flags(tmp_path):
    from app.commands.serve import app_command

    cfg = tmp_path / "rl.toml"
    args = build_parser().parse_args(
        ["--pod", "a", "serve", "--demo", "--pod", "u@b:2222", "--no-local", "--config", str(cfg)]
    )
    command = app_command(args)
    assert command == (f"exec {sys.executable} -m app.cli --demo --pod a --pod u@b:2222 --no-local --config {cfg}")
    assert app_command(build_parser().parse_args(["--demo", "serve"])).endswith("-m app.cli --demo")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "example.org"])
def test_serve_refuses_an_address_others_can_reach_without_public(host, capsys):
    assert main(["serve", "--host", host]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"prime-train-tui: refusing to serve on {host}: anyone who can reach it could drive "
        "the app (rent pods, kill runs)"
    )
    assert "--public" in err[1]


def test_serve_on_every_address_needs_the_url_browsers_use(capsys):
    assert main(["serve", "--host", "0.0.0.0", "--public"]) == 2
    assert "--public-url" in capsys.readouterr().err


def test_public_serving_warns_and_a_bad_address_fails_in_one_line(tmp_path):
    # 192.0.2.7 (TEST-NET) is no address of this machine: the warning, then the bind fails cleanly
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--host", "192.0.2.7", "--public", "--port", str(free_port())],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert lines[0].startswith("prime-train-tui: warning: serving on 192.0.2.7:")
    assert "anyone on the network" in lines[0] and "kill runs" in lines[0]
    assert lines[1].startswith("prime-train-tui: cannot serve on 192.0.2.7:") and "Traceback" not in proc.stderr
    assert lines[2] == "  hint: --host must be an address of this machine"


def test_a_taken_port_is_one_line(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"prime-train-tui: cannot serve on 127.0.0.1:{port}:" in proc.stderr
    assert "pick another --port" in proc.stderr


def test_bad_port_is_a_usage_error(capsys):
    assert main(["serve", "--port", "0"]) == 2
    assert "--port 0 is not a port" in capsys.readouterr().err


def test_without_the_extra_serve_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "textual_serve", None)
    assert main(["serve", "--demo"]) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "prime-train-tui: the browser view needs the 'serve' extra: pip install 'prime-train-tui[serve]'"
    )


def test_the_server_answers_only_to_its_own_names():
    from app.commands.serve import allowed_hosts, allowed_origins

    local = allowed_hosts("127.0.0.1", 8000, "http://127.0.0.1:8000")
    assert local == {"127.0.0.1:8000", "localhost:8000", "[::1]:8000"}
    assert "http://localhost:8000" in allowed_origins(local)
    assert "http://evil.example" not in allowed_origins(local)
    assert "http://localhost:9000" not in allowed_origins(local)
    public = allowed_hosts("0.0.0.0", 8000, "http://10.0.0.5:8000")
    assert {"10.0.0.5:8000", "127.0.0.1:8000"} <= public and "evil.example:8000" not in public
    assert allowed_hosts("10.0.0.5", 8000, "http://10.0.0.5:8000") == {"10.0.0.5:8000"}
    # behind a proxy on the default port the browser leaves the port out
    assert "tui.example.org" in allowed_hosts("127.0.0.1", 8000, "https://tui.example.org")
