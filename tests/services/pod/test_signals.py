"""The probe's prime-rl signals against real parts: a run dir's broadcasts/step_N markers, real processes
titled PRIME-RL::<Name>, real HTTP servers on 127.0.0.1 named by the run's resolved configs, the probe
as a subprocess, and once through a real sshd."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from services.models import Sample
from services.pod.agent import signals as sig
from services.pod.ssh import SSHConnection
from tests.services.pod.probe_support import make_env

METRICS = (
    b"# HELP trainer_step Current training step\n# TYPE trainer_step gauge\ntrainer_step 12.0\n"
    b"# HELP trainer_last_step_timestamp_seconds Unix timestamp of last step\n"
    b"# TYPE trainer_last_step_timestamp_seconds gauge\ntrainer_last_step_timestamp_seconds 1.7e+09\n"
    b"trainer_loss 0.41\n"
)


def marker(d: Path, name: str, at: float) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).touch()
    os.utime(d / name, (at, at))


def broadcasts(run: Path, steps: range, t0: float = 1000.0) -> None:
    """Steps as prime-rl's NCCL broadcast leaves them: STABLE at t0 + 60 s x step, NCCL_READY 2 s later
    (3 s for odd steps)."""
    for step in steps:
        d = run / "broadcasts" / f"step_{step}"
        marker(d, "STABLE", t0 + 60 * step)
        marker(d, "NCCL_READY", t0 + 60 * step + 2 + step % 2)


def test_broadcast_markers_newest_step_and_handshakes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    b = sig.Broadcasts(str(run))
    assert b.read() is None  # before the first broadcast
    broadcasts(run, range(14))
    marker(run / "broadcasts" / "step_14", "STABLE", 1840.0)  # the trainer waits for inference
    got = b.read()
    assert got is not None
    assert (got["step"], got["stable"], got["ready"]) == (14, 1840.0, None)
    assert got["handshakes"] == [[s, 2.0 + s % 2] for s in range(4, 14)]  # the 10 before the newest
    marker(run / "broadcasts" / "step_14", "NCCL_READY", 1843.5)  # now both sides transfer
    got = b.read()
    assert got is not None and (got["step"], got["ready"]) == (14, 1843.5)
    # a finished handshake is not re-read: its markers may be touched again, the cached time stands
    marker(run / "broadcasts" / "step_13", "NCCL_READY", 5000.0)
    assert b.read()["handshakes"][-1] == [13, 3.0]


def test_broadcast_resume_and_filesystem_transfer(tmp_path: Path) -> None:
    run = tmp_path / "run"
    broadcasts(run, range(3))
    # a resume re-broadcasts step 2: a new STABLE beside the old run's NCCL_READY, which is not an answer
    marker(run / "broadcasts" / "step_2", "STABLE", 9000.0)
    got = sig.Broadcasts(str(run)).read()
    assert got is not None and (got["step"], got["stable"], got["ready"]) == (2, 9000.0, None)
    fs = tmp_path / "fs"  # filesystem transfer: STABLE only, never a handshake
    for step in (7, 8):
        marker(fs / "broadcasts" / f"step_{step}", "STABLE", 100.0 + step)
    got = sig.Broadcasts(str(fs)).read()
    assert got == {"step": 8, "stable": 108.0, "ready": None, "handshakes": []}


def titled(title: str) -> subprocess.Popen:
    """A process whose cmdline starts with ``title``, as setproctitle leaves prime-rl's."""
    return subprocess.Popen([title, "60"], executable="sleep")


def test_roles_from_process_titles(tmp_path: Path) -> None:
    procs = [
        titled("PRIME-RL::Trainer"),
        titled("PRIME-RL::Inference"),
        titled("PRIME-RL::EnvServer"),
        titled("PRIME-RL::EnvServer"),
        titled("not-PRIME-RL::Trainer"),
    ]
    try:
        roles = sig.Roles("/proc")
        deadline = time.monotonic() + 5
        while (got := roles.read()).get("EnvServer") != 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert got.get("Trainer", 0) >= 1 and got.get("Inference", 0) >= 1 and got["EnvServer"] >= 2
        mine = {p.pid for p in procs}
        assert {int(pid) for pid, r in roles.role.items() if r} >= mine - {procs[-1].pid}
        assert roles.role[str(procs[-1].pid)] is None
        procs[1].kill()
        procs[1].wait()
        after = roles.read()
        assert after.get("Inference", 0) == got["Inference"] - 1  # gone at the next look (the pid left /proc)
    finally:
        for p in procs:
            p.kill()
            p.wait()


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, bytes]] = {}
    delay = 0.0

    def do_GET(self) -> None:
        time.sleep(self.delay)
        status, body = self.routes.get(self.path, (404, b""))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve(routes: dict[str, tuple[int, bytes]], delay: float = 0.0) -> ThreadingHTTPServer:
    handler = type("H", (_Handler,), {"routes": routes, "delay": delay})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers() -> Iterator[list[ThreadingHTTPServer]]:
    started: list[ThreadingHTTPServer] = []
    yield started
    for s in started:
        s.shutdown()
        s.server_close()


def configs(run: Path, trainer_port: int | None, inference: dict | None, host: str = "0.0.0.0") -> None:
    (run / "configs").mkdir(parents=True, exist_ok=True)
    ms = None if trainer_port is None else {"port": trainer_port, "host": host}
    (run / "configs" / "trainer.json").write_text(json.dumps({"metrics_server": ms, "max_steps": 20}))
    if inference is not None:
        (run / "configs" / "inference.json").write_text(json.dumps(inference))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_endpoints_from_the_resolved_configs(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert sig.endpoints(str(run)) == {}  # no configs: no port is guessed
    configs(
        run, 8001, {"server": {"host": None, "port": 8000}, "router": {"type": "vllm-router"}, "backend_port": 8100}
    )
    assert sig.endpoints(str(run)) == {"trainer": 8001, "inference": 8100}  # the engine behind the router
    configs(run, 8001, {"server": {"host": None, "port": 9000}, "router": None}, host="10.0.0.5")
    assert sig.endpoints(str(run)) == {"inference": 9000}  # bound elsewhere than loopback: left out
    (run / "configs" / "trainer.json").unlink()
    (run / "configs" / "inference.json").unlink()
    (run / "configs" / "rl.json").write_text(
        json.dumps(
            {"trainer": {"metrics_server": {"port": 8002}}, "inference": {"server": {"port": 8000}, "router": {}}}
        )
    )
    assert sig.endpoints(str(run)) == {"trainer": 8002, "inference": 8100}


def test_http_checks_against_real_servers(tmp_path: Path, servers: list) -> None:
    trainer = serve({"/health": (200, b"ok\n"), "/metrics": (200, METRICS)})
    engine = serve({"/health": (200, b"")})
    servers += [trainer, engine]
    run = tmp_path / "run"
    configs(run, trainer.server_address[1], {"server": {"port": engine.server_address[1]}, "router": None})
    got = sig.check_http(sig.endpoints(str(run)))
    assert got["trainer"] == {"health": True, "step": 12, "last_step_ts": 1.7e9}
    assert got["inference"] == {"health": True}
    assert abs(got["at"] - time.time()) < 5
    # the engine dies (its port refuses), then a sick one answers 503: health false, the trainer's stands
    dead = free_port()
    configs(run, trainer.server_address[1], {"server": {"port": dead}, "router": None})
    assert sig.check_http(sig.endpoints(str(run)))["inference"] == {"health": False}
    sick = serve({"/health": (503, b"")})
    servers.append(sick)
    configs(run, trainer.server_address[1], {"server": {"port": sick.server_address[1]}, "router": None})
    assert sig.check_http(sig.endpoints(str(run)))["inference"] == {"health": False}


def test_http_is_bounded_in_time_and_size(tmp_path: Path, servers: list) -> None:
    huge = b"x" * (10 * 1024 * 1024) + b"\ntrainer_step 99\n"  # the gauge past 64 KiB is never read
    slow = serve({"/health": (200, b"ok")}, delay=5.0)
    big = serve({"/health": (200, b"ok"), "/metrics": (200, huge)})
    servers += [slow, big]
    t0 = time.monotonic()
    got = sig.check_http({"inference": slow.server_address[1], "trainer": big.server_address[1]})
    took = time.monotonic() - t0
    assert took < sig.HTTP_BUDGET_S + 0.3, took  # one hung server costs the whole budget, not more
    assert got["inference"] == {"health": False}
    assert got["trainer"] is not None and got["trainer"]["health"] is False  # no time left for it
    got = sig.check_http({"trainer": big.server_address[1]})
    assert got["trainer"] == {"health": True, "step": None, "last_step_ts": None}


def test_parse_gauges_skips_labels_comments_and_garbage() -> None:
    text = (
        '# trainer_step 5\ntrainer_step{rank="0"} 7\ntrainer_step nan\ntrainer_step 8\n'
        "trainer_last_step_timestamp_seconds x\ntrainer_last_step_timestamp_seconds 1e9\n"
    )
    assert sig.parse_gauges(text) == {"trainer_step": 8.0, "trainer_last_step_timestamp_seconds": 1e9}


def test_the_probe_sends_signals_and_the_app_reads_them(tmp_path: Path, start_probe, servers: list) -> None:
    run = tmp_path / "run"
    broadcasts(run, range(3))
    marker(run / "broadcasts" / "step_3", "STABLE", 1180.0)
    trainer = serve({"/health": (200, b"ok\n"), "/metrics": (200, METRICS)})
    servers.append(trainer)
    configs(run, trainer.server_address[1], {"server": {"port": free_port()}, "router": None})
    inference = titled("PRIME-RL::Inference")
    try:
        p = start_probe(["--backend", "none", "--interval", "0.2", "--run-dir", str(run)], make_env(None))
        deadline = time.monotonic() + 5
        while not (raw := p.sample())["signals"]["roles"].get("Inference") and time.monotonic() < deadline:
            pass
    finally:
        inference.kill()
        inference.wait()
    s = Sample.from_dict(raw)
    assert s.signals is not None and s.signals.broadcast is not None
    assert (s.signals.broadcast.step, s.signals.broadcast.stable, s.signals.broadcast.ready) == (3, 1180.0, None)
    assert s.signals.broadcast.handshakes == ((0, 2.0), (1, 3.0), (2, 2.0))
    assert s.signals.alive("Inference")  # (other PRIME-RL processes on this machine may count too)
    assert s.signals.trainer is not None and s.signals.trainer.step == 12
    assert s.signals.inference is not None and s.signals.inference.health is False


def test_an_older_app_and_a_broken_field() -> None:
    base = {"v": 1, "t": 5.0, "gpus": [], "host": {}}
    assert Sample.from_dict(base).signals is None  # an older probe
    s = Sample.from_dict({**base, "signals": {"broadcast": {"step": "x"}, "roles": {}}})
    assert s.signals is None and any("prime-rl signals were unreadable" in e for e in s.errors)
    s = Sample.from_dict({**base, "signals": {"broadcast": None, "roles": {"\x1b[31mTrainer": 1}, "http": None}})
    assert s.signals is not None and s.signals.roles == (("Trainer", 1),)


async def test_signals_through_a_real_sshd(sshd, client_home, tmp_path: Path) -> None:
    client_home.trust()
    run = tmp_path / "run"
    broadcasts(run, range(2))
    marker(run / "broadcasts" / "step_2", "STABLE", 1120.0)
    pod = sshd.pod(probe_dir=str(tmp_path / "probe-cache"))
    async with SSHConnection(pod) as conn:
        stream = await conn.start_probe(["--interval", "0.2", "--run-dir", str(run)])
        line = await asyncio.wait_for(stream.readline(), 10)
        assert line, stream.stderr_tail()
        s = Sample.from_line(line)
    assert s.signals is not None and s.signals.broadcast is not None
    assert (s.signals.broadcast.step, s.signals.broadcast.handshakes) == (2, ((0, 2.0), (1, 3.0)))
    assert s.signals.roles is not None and s.signals.http_at is None  # no config names an endpoint
