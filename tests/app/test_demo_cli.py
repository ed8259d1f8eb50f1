"""Headless commands on the demo pod: `status demo` starts a run in its sandbox when none runs, `profile`,
`kill demo --yes`, `resume demo --yes` act on it through the lifecycle, and nothing lands outside the
sandbox (this machine's home stays empty)."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from app.cli import main
from app.settings import data_dir
from services.demo.pod import DemoPod


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-value")
    demo = DemoPod(root=data_dir() / "demo-pod")
    yield demo
    demo.stop_runs(signal.SIGKILL, wait=5.0)  # a headless start has no owner: it would run on
    assert list(home.iterdir()) == [], "something was written to this machine's home"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_status_starts_a_demo_run_then_kill_and_resume_act_on_it(sandbox: DemoPod, capsys) -> None:
    assert cli(capsys, "kill", "demo", "--yes")[0] == 1  # nothing there yet: said, nothing started
    assert sandbox.trainer_pids() == []

    code, out, err = cli(capsys, "status", "demo", "--json")
    assert code == 0, err
    pod = json.loads(out)["pods"][0]
    assert pod["name"] == "demo" and pod["state"] == "online" and len(pod["gpus"]) == 8
    assert pod["run"]["step"] >= 20  # the head start: a run with steps to read
    assert "started the demo run in" in err
    pids = sandbox.trainer_pids()
    assert len(pids) == 1
    cmd = Path(f"/proc/{pids[0]}/cmdline").read_bytes().decode().split("\0")
    root = sandbox.root.resolve()
    assert Path(cmd[cmd.index("--run-dir") + 1]).resolve().is_relative_to(root)
    assert Path(os.readlink(f"/proc/{pids[0]}/cwd")).resolve().is_relative_to(root)
    environ = Path(f"/proc/{pids[0]}/environ").read_bytes().decode()
    assert "wandb-secret-value" not in environ  # this machine's secrets stay here
    records = list((sandbox.state_dir / "runs").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["run_dir"] == str(sandbox.run_dir)

    code, out, err = cli(capsys, "status", "demo", "--json")  # the run is there: looked at, not restarted
    assert code == 0 and "started" not in err and sandbox.trainer_pids() == pids

    code, out, err = cli(capsys, "profile", "demo", "--json", "--steps", "10")
    assert code == 0, err
    assert json.loads(out)["steps"] == 10

    code, out, err = cli(capsys, "kill", "demo", "--yes")
    assert code == 0, err
    assert "killed" in out and sandbox.trainer_pids() == []
    stopped = int(
        re.search(r"the run stops after step (\d+)", (sandbox.run_dir / "logs" / "trainer.log").read_text()).group(1)
    )
    code, _, err = cli(capsys, "kill", "demo", "--yes")
    assert code == 1 and "no active run on demo" in err

    code, out, err = cli(capsys, "resume", "demo", "--yes")
    assert code == 0, err
    every = json.loads((sandbox.root / "demo.json").read_text())["ckpt_interval"]
    newest = stopped - stopped % every  # the demo's checkpoint interval
    assert f"newest complete checkpoint step_{newest}" in out
    assert f"step_{stopped + 1} is incomplete" in out  # cut short by the kill: skipped
    assert len(sandbox.trainer_pids()) == 1
    log = (sandbox.run_dir / "logs" / "trainer.log").read_text()
    assert f"Resuming from checkpoint step_{newest}: starting from step {newest + 1}" in log
    assert cli(capsys, "kill", "demo", "--yes")[0] == 0


def test_status_right_after_the_demo_run_restarts_has_no_alert(sandbox: DemoPod, capsys) -> None:
    """The demo's trainer stamps its lines from a simulated clock that starts again with each run: the restarted
    run's first lines carry older stamps than the killed run's last ones, which once read as a day between
    them ("no new step for 23 h 59 min", critical) seconds after the restart."""
    assert cli(capsys, "status", "demo", "--json")[0] == 0  # starts the run (its head start: 20 steps)
    assert cli(capsys, "kill", "demo", "--yes")[0] == 0
    code, out, err = cli(capsys, "status", "demo", "--json")  # none runs: started again
    assert code == 0 and "started the demo run in" in err, err
    pod = json.loads(out)["pods"][0]
    assert pod["alerts"] == [], pod["alerts"]
    assert pod["run"]["phase"] == "running" and pod["run"]["last_step_age_s"] < 60
