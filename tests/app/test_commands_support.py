"""The subcommands' shared POD/run-dir resolution and connection (app/commands/_support.py)."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from app.commands._support import connected, connection_for, need_run_dir, pod_arg
from services.demo.connection import DemoConnection
from services.errors import PodSpecError
from services.models import Pod, PodKind
from services.monitor.service import MonitorSettings
from services.pod.local import LocalConnection


@pytest.fixture(autouse=True)
def _config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path))


def ns(pod: str, run_dir: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(pod=pod, run_dir=run_dir)


def test_run_dir_comes_from_the_flag_over_pods_toml(tmp_path):
    (tmp_path / "pods.toml").write_text('[pods.h100]\nhost = "10.0.0.9"\nrun_dir = "/saved/run"\n')
    assert pod_arg(ns("h100")).run_dir == "/saved/run"
    assert pod_arg(ns("h100", "/flag/run")).run_dir == "/flag/run"
    assert pod_arg(ns("local")).run_dir is None
    assert pod_arg(argparse.Namespace(pod="local")).kind is PodKind.LOCAL  # commands without --run-dir


def test_a_missing_run_dir_is_a_pod_spec_error_with_the_commands_hint():
    with pytest.raises(PodSpecError, match="no run directory for local") as err:
        need_run_dir(pod_arg(ns("local")), "pass --run-dir DIR")
    assert err.value.hint == "pass --run-dir DIR"
    assert need_run_dir(pod_arg(ns("local", "/r")), "unused") == "/r"


def test_bad_pod_argument_raises_a_pod_spec_error():
    with pytest.raises(PodSpecError):
        pod_arg(ns("bad@@"))


def test_the_demo_pod_is_simulated_only_when_demo_settings_are_given():
    demo = Pod(name="demo", kind=PodKind.DEMO)
    assert isinstance(connection_for(demo, MonitorSettings()), DemoConnection)
    plain = connection_for(demo)
    assert isinstance(plain, LocalConnection) and not isinstance(plain, DemoConnection)
    assert type(connection_for(Pod(name="local", kind=PodKind.LOCAL), MonitorSettings())) is LocalConnection


def test_connected_stops_what_it_started_when_the_block_fails():
    async def go() -> asyncio.subprocess.Process:
        started = {}
        with pytest.raises(RuntimeError, match="boom"):
            async with connected(Pod(name="local", kind=PodKind.LOCAL)) as conn:
                stream = await conn.start_probe(["--interval", "0.2"])
                assert await asyncio.wait_for(stream.readline(), 20)  # the probe is really running
                started["proc"] = stream._proc
                raise RuntimeError("boom")
        return started["proc"]

    proc = asyncio.run(go())
    assert proc.returncode is not None  # closed on the way out: the probe process has exited
