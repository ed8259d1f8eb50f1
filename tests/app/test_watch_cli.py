"""``prime-train-tui watch`` and ``notify`` as the user runs them, over real parts.

The watcher is a real process watching the real sshd pod, whose run is the simulated trainer's (a real run
dir); pushes go through apprise to a webhook receiver on 127.0.0.1, with no TUI running. The trainer is
frozen (SIGSTOP): the receiver gets ONE "opened" with the step and the fix; thawed (SIGCONT): ONE
"resolved"; nothing else. Meanwhile /metrics (parsed with prometheus_client's parser) shows the pod's GPUs
and the alert, a second watcher on the same data dir exits 2 naming the first, the logs on stderr are JSON
lines without the URL, and after SIGTERM the state file tells the TUI what happened. ``watch --once``
exits 0 with a JSON summary; ``notify --test`` sends a test message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.cli import main
from services.watch.state import STATE_NAME, read_state, watch_notice
from tests.conftest import free_port
from tests.services.watch.receiver import receiver
from tests.services.watch.test_watcher import start_trainer

REPO = Path(__file__).resolve().parents[2]
FAST_HEALTH = (
    "[health]\nstall_k = 3\nstall_floor_s = 2.5\nstall_cap_s = 10\nstall_start_s = 60\nnofile_min = 0\n"
    "disk_pct = 100\ndisk_critical_pct = 100\n"
)


def cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def write_config(pod, run: Path, tmp_path: Path, notify: str = "") -> Path:
    config = Path(os.environ["PRIME_TRAIN_TUI_CONFIG_DIR"])  # client_home's
    config.mkdir(parents=True, exist_ok=True)
    (config / "pods.toml").write_text(
        f'[pods.testpod]\nhost = "127.0.0.1"\nuser = "{pod.user}"\nport = {pod.port}\nrun_dir = "{run}"\n'
        f'probe_dir = "{pod.probe_dir}"\n'
    )
    (config / "settings.toml").write_text(FAST_HEALTH + notify)
    return config


def scrape(port: int) -> dict[str, list] | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None  # not serving yet
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def wait(test, timeout: float = 30.0, what: str = ""):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := test():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def step_of(port: int) -> float:
    m = scrape(port) or {}
    return max([v for lb, v in m.get("ptt_run_step", []) if lb["pod"] == "testpod"], default=0.0)


def test_the_watcher_over_real_sshd_pushes_one_opened_and_one_resolved(pod, tmp_path: Path) -> None:
    run = tmp_path / "run"
    trainer = start_trainer(run)
    port = free_port()
    out, err = open(tmp_path / "stdout", "w+"), open(tmp_path / "stderr", "w+")
    watcher = None
    try:
        with receiver() as rx:
            write_config(
                pod,
                run,
                tmp_path,
                f'[notify]\nurls = ["{rx.url("T0KEN-hook")}"]\nresolve_after_s = 1\nmin_interval_s = 600\n',
            )
            watcher = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "watch", "--metrics-port", str(port), "--interval", "0.2", "--json"],
                cwd=REPO,
                stdout=out,
                stderr=err,
                env=dict(os.environ),
            )

            def running_steps() -> bool:
                if watcher.poll() is not None:
                    err.seek(0)
                    raise AssertionError(f"the watcher exited {watcher.returncode}: {err.read()}")
                return step_of(port) >= 3

            wait(running_steps, 60, "the run's steps in /metrics")
            assert rx.bodies == []
            os.kill(trainer.pid, signal.SIGSTOP)  # the run stalls
            rx.wait_for(lambda b: len(b) >= 1, 30, "the opened message")
            opened = rx.bodies[0]
            assert opened["title"] == "[OPENED] testpod: No training progress"
            assert f"run {run} · step " in opened["message"] and "(last: step " in opened["message"]
            assert "Fix: If it is stuck, kill it and resume from the last complete checkpoint." in opened["message"]

            m = scrape(port)
            gpus = {lb["gpu"] for lb, _ in m["ptt_gpu_utilization_percent"] if lb["pod"] == "testpod"}
            assert gpus == {str(i) for i in range(8)}  # the pod's fake nvidia-smi: 8 GPUs
            assert len([1 for lb, _ in m["ptt_gpu_memory_used_bytes"] if lb["pod"] == "testpod"]) == 8
            assert ({"pod": "testpod", "rule": "no-progress", "severity": "critical"}, 1.0) in m["ptt_alert_active"]

            second = cli("watch", "testpod")  # one watcher per data dir
            assert second.returncode == 2
            assert "another watcher is running on this data dir" in second.stderr
            assert f"pid {watcher.pid} (" in second.stderr

            os.kill(trainer.pid, signal.SIGCONT)  # it moves again
            rx.wait_for(lambda b: len(b) >= 2, 30, "the resolved message")
            time.sleep(1.5)  # longer than resolve_after_s: nothing more comes
            assert [b["title"] for b in rx.bodies] == [
                "[OPENED] testpod: No training progress",
                "[RESOLVED] testpod: No training progress",
            ], rx.bodies
            watcher.send_signal(signal.SIGTERM)
            assert watcher.wait(30) == 0
    finally:
        os.kill(trainer.pid, signal.SIGCONT)
        trainer.kill()
        trainer.wait()
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
    logs = [json.loads(line) for line in stderr.splitlines() if line.strip()]  # every line is JSON
    assert {"watch started", "alert opened", "notification sent", "alert resolved", "watch stopped"} <= {
        entry["msg"] for entry in logs
    }
    assert "T0KEN" not in stdout + stderr  # the URL is a secret
    started = next(e for e in logs if e["msg"] == "watch started")
    assert started["notify"] == ["json://***"] and started["metrics"] == f"http://127.0.0.1:{port}/metrics"
    events = [json.loads(line)["event"] for line in stdout.splitlines() if line.strip()]
    assert events.count("alert opened") == 1 and events.count("alert resolved") == 1

    data = Path(os.environ["PRIME_TRAIN_TUI_DATA_DIR"])
    state = read_state(data / STATE_NAME)
    assert state["stopped"] is not None and "T0KEN" not in json.dumps(state)
    notice = watch_notice(data)  # what the TUI shows when opened next
    assert notice.startswith("No watcher is running") and "no-progress on testpod" in notice


def test_watch_once_prints_a_json_summary_and_exits_0(pod, tmp_path: Path) -> None:
    run = tmp_path / "run"
    trainer = start_trainer(run)
    try:
        wait(lambda: (run / "logs" / "trainer.log").exists(), 30, "the trainer's log")
        write_config(pod, run, tmp_path)
        done = cli("watch", "--once", "--interval", "0.2")
    finally:
        trainer.kill()
        trainer.wait()
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    (p,) = summary["pods"]
    assert p["name"] == "testpod" and p["reached"] and p["state"] == "online" and len(p["gpus"]) == 8
    assert p["run_dir"] == str(run) and summary["reached"] == 1 and isinstance(summary["alerts"], int)


def test_notify_test_sends_a_test_message_and_reports_a_dead_target_masked(tmp_path: Path, monkeypatch, capsys):
    config = tmp_path / "config"
    config.mkdir()
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(config))
    with receiver() as rx:
        (config / "settings.toml").write_text(f'[notify]\nurls = ["{rx.url("T0KEN-hook")}"]\n')
        assert main(["notify", "--test"]) == 0
        assert capsys.readouterr().out == "json://***: sent\n"
        (body,) = rx.bodies
        assert body["title"] == "[TEST] prime-train-tui notifications work"
        assert main(["notify", "--test", "--notify", f"json://127.0.0.1:{free_port()}/T0KEN-dead"]) == 1
        captured = capsys.readouterr()
        assert captured.out == "json://***: sent\njson://***: FAILED\n" and "1 of 2" in captured.err
        assert main(["notify"]) == 0  # the listing: masked
        assert capsys.readouterr().out.startswith("json://***\nmin_severity warning")
        assert "T0KEN" not in captured.out + captured.err


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, monkeypatch, capsys):
    config = tmp_path / "config"
    config.mkdir()
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(config))
    assert main(["notify", "--test"]) == 2
    assert "no notification URLs" in capsys.readouterr().err
    assert main(["watch"]) == 2  # no pods.toml, no POD
    assert "no pods to watch" in capsys.readouterr().err
    assert main(["watch", "local", "--metrics-port", "70000"]) == 2
    assert "--metrics-port must be a port number" in capsys.readouterr().err
    (config / "settings.toml").write_text('[notify]\nurls = "slack://T0KEN-s3cr3t"\n')
    assert main(["watch", "local"]) == 2
    err = capsys.readouterr().err
    assert "notify.urls must be an array" in err and "T0KEN" not in err
    (config / "settings.toml").write_text('[notify]\nurls = ["nosuch://T0KEN-s3cr3t"]\n')
    assert main(["watch", "local"]) == 2
    err = capsys.readouterr().err
    assert "notification URL #1 (nosuch://***)" in err and "T0KEN" not in err


async def test_the_tui_says_at_start_what_the_watcher_saw_while_it_was_closed(tmp_path: Path) -> None:
    """The state file a watcher left: the TUI's start notice says whether one runs and what it saw."""
    from app.tui import PrimeTrainApp
    from services.models import Alert, Pod, PodKind, Severity
    from services.monitor.service import MonitorService
    from services.watch.state import WatchState
    from services.watch.threads import AlertBook, Policy
    from tests.app.helpers import Parked, wait_for

    data = Path(os.environ["PRIME_TRAIN_TUI_DATA_DIR"])
    book = AlertBook(Policy())
    book.update("p1", [Alert("gpu-dead", Severity.CRITICAL, "Inference server likely died", "m.", 1.0)], time.time())
    state = WatchState(data)
    state.stopped = time.time()
    state.save(book)
    app = PrimeTrainApp(
        [Pod("p1", PodKind.SSH, host="h")],
        pods_path=tmp_path / "pods.toml",
        monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: Parked(p)),
    )
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await wait_for(pilot, lambda: any("watcher" in n.message for n in app._notifications), timeout=10)
        (note,) = [n.message for n in app._notifications if "watcher" in n.message]
        assert note.startswith("No watcher is running") and "gpu-dead on p1" in note


@pytest.mark.parametrize(
    "text, says",
    [
        ('[notfy]\nurls = ["ntfy://T0KEN-topic"]\n', ("line 1", "unknown table [notfy]", "did you mean [notify]?")),
        ('[notify]\nurl = ["ntfy://T0KEN-topic"]\n', ("line 2", "unknown key url in [notify]", "did you mean urls?")),
    ],
)
def test_a_typo_in_the_notify_table_is_named_with_its_line(tmp_path: Path, monkeypatch, text: str, says) -> None:
    from app.commands.watch import load_notify
    from services.errors import SettingsError

    config = tmp_path / "config"
    config.mkdir()
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(config))
    (config / "settings.toml").write_text(text)
    with pytest.raises(SettingsError) as info:
        load_notify([])
    assert all(s in str(info.value) for s in says) and "T0KEN" not in str(info.value) + info.value.hint


def test_the_watch_table_allows_budget_terminations_and_names_its_typos(tmp_path: Path, monkeypatch, capsys):
    from app.commands.watch import load_watch_options
    from services.errors import SettingsError

    config = tmp_path / "config"
    config.mkdir()
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(config))
    assert load_watch_options()["terminate_over_budget"] is False  # off unless asked for
    (config / "settings.toml").write_text("[watch]\nterminate_over_budget = true\n")
    (config / "backup.toml").write_text('[backup]\nbucket = "my-ckpts"\n')
    opts = load_watch_options()
    assert opts["terminate_over_budget"] is True and opts["backup"].bucket == "my-ckpts"
    (config / "settings.toml").write_text("[watch]\nterminate_over_budgt = true\n")
    with pytest.raises(SettingsError, match="unknown key terminate_over_budgt in \\[watch\\]"):
        load_watch_options()
    (config / "settings.toml").write_text('[watch]\nterminate_over_budget = "yes"\n')
    assert main(["watch", "local", "--once"]) == 2
    assert "terminate_over_budget" in capsys.readouterr().err
