"""Hardening item 8: the prime-rl config reader (``read_config``: ``validate``, the Config pane, ``config
save/diff``, ``offers --config``) read whatever it was given. A FIFO hung them (the open itself blocks until a
writer comes; the TUI could not quit), ``validate /dev/zero`` grew to 10.6 GB of memory, a 43 MB file took
over a minute. Now only a regular file of at most 4 MiB is read (opened non-blocking, the read bounded, not
trusting stat): anything else is one line and exit 2, and the Config pane says it cannot read it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.panes.config import ConfigPane
from app.tui import PrimeTrainApp
from services.config.findings import ConfigError
from services.config.validate import CONFIG_MAX_BYTES, read_config
from tests.app.helpers import panes_mounted, wait_for

REPO = Path(__file__).resolve().parents[2]


def _special(kind: str, tmp_path: Path) -> Path:
    if kind == "fifo":
        path = tmp_path / "rl.toml"
        os.mkfifo(path)
        return path
    if kind == "dev-zero":
        return Path("/dev/zero")
    path = tmp_path / "big.toml"
    with open(path, "w") as f:  # valid TOML, one byte over the limit
        f.write("# " + "x" * (CONFIG_MAX_BYTES - 2) + "\n")
    assert path.stat().st_size == CONFIG_MAX_BYTES + 1
    return path


WHY = {
    "fifo": "is not a regular file (a named pipe)",
    "dev-zero": "is not a regular file (a character device)",
    "big": "is larger than 4 MiB",
}


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(tmp_path / "cfg"),
        "PRIME_TRAIN_TUI_DATA_DIR": str(tmp_path / "data"),
        "PYTHONPATH": str(REPO),
    }
    # a timeout well under what a hang or the 10 GB read took; subprocess.run kills the child on expiry
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=20, env=env
    )


@pytest.mark.parametrize("kind", list(WHY))
def test_validate_refuses_it_with_one_line(tmp_path, kind):
    path = _special(kind, tmp_path)
    r = _cli(tmp_path, "validate", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    [line] = r.stderr.splitlines()
    assert str(path) in line and WHY[kind] in line, line


@pytest.mark.parametrize("kind", ["fifo", "big"])
def test_offers_config_refuses_it_with_one_line(tmp_path, kind):
    path = _special(kind, tmp_path)
    r = _cli(tmp_path, "offers", "--config", str(path), "--json")
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    [line] = r.stderr.splitlines()
    assert WHY[kind] in line, line


def test_a_config_at_the_limit_is_read(tmp_path):
    path = tmp_path / "rl.toml"
    path.write_text("# " + "x" * (CONFIG_MAX_BYTES - 3))
    assert len(read_config(path)) == CONFIG_MAX_BYTES - 1
    with pytest.raises(ConfigError, match="is a directory"):
        read_config(tmp_path)


async def test_the_config_pane_says_it_cannot_read_a_fifo_and_the_app_quits(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("PRIME_TRAIN_TUI_DATA_DIR", str(tmp_path / "data"))
    fifo = _special("fifo", tmp_path)
    app = PrimeTrainApp([], config_path=fifo)
    try:
        async with app.run_test(size=(140, 45)) as pilot:
            await panes_mounted(pilot)
            pane = app.query_one(ConfigPane)
            await wait_for(pilot, lambda: any(WHY["fifo"] in n.message for n in app._notifications), timeout=5)
            assert "cannot read" in str(pane.query_one("#config-status").render())
    finally:
        try:  # a reader stuck in open() (the defect) is let go, so a failing test ends instead of hanging
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
