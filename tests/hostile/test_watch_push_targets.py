"""Hardening item 5: one slow webhook silenced every push. The watcher sent each message to its targets one
after another in one thread, so a target that trickles its answer (a byte now and then: apprise's connect
and read timeouts never fire) held every later push to every target; after SIGTERM the watcher waited for
it (15 s, then the thread pool's join at exit); a push that failed once (a 500, a short outage) was lost.

Now each target has its own sender over a persisted outbox (services/watch/outbox.py): each push is bounded
by its target's total time (``[notify] timeout_s``) and abandoned at it, a failed push is retried with
backoff until delivered or expired, also by the next watcher, and a stop takes a few seconds whatever a
target does. Item 10d: ``--metrics-addr 0.0.0.0`` binds with a warning, as ``serve`` warns.

Real parts: apprise's json:// posting to HTTP servers on 127.0.0.1 (one answers 500 until told otherwise,
one trickles its status line a byte every 0.2 s forever), the watcher in-process and as a real `watch`
process stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from services.models import Severity
from services.watch.notify import NotifySettings
from services.watch.state import STATE_NAME, read_state, watch_notice
from services.watch.threads import Message
from services.watch.watcher import Watcher, WatchOptions
from tests.conftest import free_port
from tests.services.watch.receiver import receiver

REPO = Path(__file__).resolve().parents[2]
OUTBOX = "watch-outbox.json"


class Trickle:
    """Takes each POST, then answers one byte every ``every`` s, never finishing (until the test ends)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.posts = 0
        self.stop = threading.Event()

    def url(self, path: str = "T0KEN-slow") -> str:
        return f"json://127.0.0.1:{self.port}/{path}"


@contextmanager
def trickle(every: float = 0.2) -> Iterator[Trickle]:
    box: list[Trickle] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            box[0].posts += 1
            status = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"." * 100000
            for byte in status:
                if box[0].stop.wait(every):
                    return
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    return

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.append(Trickle(server.server_address[1]))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield box[0]
    finally:
        box[0].stop.set()
        server.shutdown()
        server.server_close()


def message(n: int) -> Message:
    return Message("deadline", f"[DEADLINE] p{n}: warn", f"body {n}", Severity.WARNING, pod=f"p{n}")


async def until(test, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := test():
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def started(watcher: Watcher) -> None:
    await until(lambda: any(a["what"] == "started" for a in watcher.state.actions), 10, "the watcher's start")


async def test_a_trickling_target_does_not_hold_a_healthy_ones_pushes(tmp_path: Path) -> None:
    stop = asyncio.Event()
    with trickle() as slow, receiver() as rx:
        # the slow target first: sent in order, it held the healthy one for as long as it trickled
        watcher = Watcher(
            [], WatchOptions(tmp_path / "data", notify=NotifySettings((slow.url(), rx.url())), tick_s=0.1)
        )
        task = asyncio.ensure_future(watcher.run(stop))
        try:
            await started(watcher)
            t0 = time.monotonic()
            watcher.push(message(1))
            await until(lambda: len(rx.bodies) >= 1, 5, "the healthy target's first push")
            first = time.monotonic() - t0
            watcher.push(message(2))  # the slow target still trickles its first answer
            await until(lambda: len(rx.bodies) >= 2, 5, "the healthy target's second push")
            assert [b["title"] for b in rx.bodies] == ["[DEADLINE] p1: warn", "[DEADLINE] p2: warn"]
            assert first < 2.0, f"the healthy push took {first:.1f} s"
            assert slow.posts == 1  # its second push waits behind its first, in order
        finally:
            t1 = time.monotonic()
            stop.set()
            await asyncio.wait_for(task, 30)
            stopped = time.monotonic() - t1
    assert stopped < 5.0, f"stopping took {stopped:.1f} s"
    # both of the slow target's pushes wait in the outbox for the next watcher, named without their URL
    box = (tmp_path / "data" / OUTBOX).read_text()
    entries = json.loads(box)["entries"]
    assert [(e["shown"], e["message"]["title"]) for e in entries] == [
        ("#1 json://***", "[DEADLINE] p1: warn"),
        ("#1 json://***", "[DEADLINE] p2: warn"),
    ]
    assert "T0KEN" not in box and str(slow.port) not in box
    assert oct((tmp_path / "data" / OUTBOX).stat().st_mode & 0o777) == "0o600"


def test_notify_test_waits_at_most_the_deadline_for_a_trickling_target() -> None:
    """``notify --test`` (Notifier.send): the targets at once, each cut at ``timeout_s``."""
    from services.watch.notify import Notifier

    with trickle() as slow, receiver() as rx:
        t0 = time.monotonic()
        results = Notifier([slow.url(), rx.url()], timeout_s=1.0).send(message(1))
        took = time.monotonic() - t0
    assert results == [("json://***", False), ("json://***", True)] and took < 2.0, took


async def test_a_push_refused_then_delivered_after_a_restart(tmp_path: Path) -> None:
    """A 500: the push stays in the outbox; the next watcher (the target back) delivers it."""
    data = tmp_path / "data"
    with receiver(status=500) as rx:
        notify = NotifySettings((rx.url("T0KEN-hook"),))
        stop = asyncio.Event()
        watcher = Watcher([], WatchOptions(data, notify=notify, tick_s=0.1))
        task = asyncio.ensure_future(watcher.run(stop))
        await started(watcher)
        watcher.push(message(1))
        await until(
            lambda: any(a["what"] == "notified" and a["failed"] for a in watcher.state.actions), 10, "the refused push"
        )
        stop.set()
        await asyncio.wait_for(task, 30)
        assert len(rx.bodies) == 1
        between = read_state(data / STATE_NAME)
        notice = watch_notice(data, mark=False)  # what the TUI says at its start

        rx.status = 200  # the service is back; a new watcher starts
        stop = asyncio.Event()
        watcher = Watcher([], WatchOptions(data, notify=notify, tick_s=0.1))
        task = asyncio.ensure_future(watcher.run(stop))
        try:
            await until(lambda: len(rx.bodies) >= 2, 10, "the push delivered from the outbox")
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    assert [b["title"] for b in rx.bodies] == ["[DEADLINE] p1: warn"] * 2
    (failed,) = [a for a in between["actions"] if a["what"] == "notified"]
    assert failed["failed"] == 1 and failed["target"] == "#1 json://***" and failed["retry_in_s"] > 0
    assert between["outbox"]["pending"] == 1 and "T0KEN" not in json.dumps(between)
    assert "1 push(es) not delivered yet" in notice and "#1 json://*** fails" in notice
    assert json.loads((data / OUTBOX).read_text())["entries"] == []
    state = read_state(data / STATE_NAME)
    assert state["outbox"]["pending"] == 0 and "not delivered" not in (watch_notice(data, mark=False) or "")
    sent = [a for a in state["actions"] if a["what"] == "notified" and a["sent"]]
    assert sent and sent[-1]["attempts"] == 2  # counted across the two watchers


async def test_a_short_outage_is_retried_with_backoff_and_expired_pushes_are_said(tmp_path: Path) -> None:
    data = tmp_path / "data"
    said: list[dict] = []
    with receiver(status=500) as rx:
        stop = asyncio.Event()
        watcher = Watcher(
            [],
            WatchOptions(data, notify=NotifySettings((rx.url(),), retry_for_s=60.0), tick_s=0.1, retry_base_s=0.3),
            out=said.append,
        )
        task = asyncio.ensure_future(watcher.run(stop))
        try:
            await started(watcher)
            watcher.push(message(1))
            await until(lambda: len(rx.bodies) >= 3, 10, "two retries")
            rx.status = 200
            await until(lambda: watcher.dispatch.pending() == 0, 10, "the delivery")
            gaps = [b - a for a, b in zip(rx.times, rx.times[1:])]
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    assert len(rx.bodies) >= 4 and gaps[0] >= 0.25 and gaps[1] >= 0.55, gaps  # backing off: 0.3 s, 0.6 s...
    events = [e["event"] for e in said]
    assert events.count("notification failed") >= 3 and "notification sent" in events  # watch says so

    # a push older than retry_for_s is dropped, and said: not retried for ever
    with receiver(status=500) as rx:
        stop = asyncio.Event()
        said.clear()
        watcher = Watcher(
            [],
            WatchOptions(data, notify=NotifySettings((rx.url(),), retry_for_s=0.5), tick_s=0.1, retry_base_s=0.2),
            out=said.append,
        )
        task = asyncio.ensure_future(watcher.run(stop))
        try:
            await started(watcher)
            watcher.push(message(2))
            await until(lambda: any(e["event"] == "notification expired" for e in said), 10, "the expiry")
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
    assert json.loads((data / OUTBOX).read_text())["entries"] == []


def test_sigterm_stops_a_real_watcher_within_seconds_while_a_target_trickles(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh of the developer's
    out, err = open(tmp_path / "stdout", "w+"), open(tmp_path / "stderr", "w+")
    with trickle() as slow:
        # a pod nobody answers for: its "unreachable" alert is pushed at once, to the trickling target
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "watch",
                f"nobody@127.0.0.1:{free_port()}",
                "--offline-after",
                "0",
                "--interval",
                "0.2",
                "--notify",
                slow.url(),
                "--json",
            ],
            cwd=REPO,
            stdout=out,
            stderr=err,
            env=dict(os.environ),
        )
        try:
            end = time.monotonic() + 60
            while slow.posts == 0 and proc.poll() is None and time.monotonic() < end:
                time.sleep(0.05)
            assert slow.posts == 1, (proc.poll(), err.seek(0) or err.read())
            time.sleep(0.5)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(20)
            except subprocess.TimeoutExpired:
                code = None
            took = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 0 and took < 8.0, f"exit {code} after {took:.1f} s"  # 3.5 s here; was > 20 s
    err.seek(0)
    logs = [json.loads(line) for line in err.read().splitlines() if line.strip()]
    assert "watch stopped" in {e["msg"] for e in logs}
    data = Path(os.environ["PRIME_TRAIN_TUI_DATA_DIR"])
    (entry,) = json.loads((data / OUTBOX).read_text())["entries"]  # for the next watcher
    assert (
        entry["message"]["title"].startswith("[OPENED] 127.0.0.1") or "unreachable" in entry["message"]["title"].lower()
    )


def test_metrics_on_a_public_address_are_served_with_a_warning(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    out, err = open(tmp_path / "stdout", "w+"), open(tmp_path / "stderr", "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "watch",
            f"nobody@127.0.0.1:{free_port()}",
            "--metrics-port",
            "0",
            "--metrics-addr",
            "0.0.0.0",
            "--json",
        ],
        cwd=REPO,
        stdout=out,
        stderr=err,
        env=dict(os.environ),
    )
    try:
        end = time.monotonic() + 60
        while (
            "watch started" not in (tmp_path / "stdout").read_text() and proc.poll() is None and time.monotonic() < end
        ):
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    out.seek(0)
    err.seek(0)
    events = [json.loads(line) for line in out.read().splitlines() if line.strip()]
    logs = [json.loads(line) for line in err.read().splitlines() if line.strip()]  # still JSON lines only
    (warned,) = [e for e in events if e["event"] == "metrics served with no login"]
    assert warned["message"].startswith("serving metrics on 0.0.0.0:") and "anyone on the network" in warned["message"]
    assert any(e["msg"] == "metrics served with no login" and e["level"] == "warning" for e in logs)
