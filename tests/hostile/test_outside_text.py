"""Text from outside (a pod's GPU and process names, its log lines, the probe's stderr, a provider's or an
exception's message) was read as markup and reached the terminal raw. A real log line such as
``torch.OutOfMemoryError: CUDA out of memory while loading [/workspace/ckpt/step_10]`` ended the App with a
MarkupError within seconds (the alert's toast; again at every start), ``[@click=app.quit]`` became an action,
``[rank0]:`` vanished; ``status`` and ``probe --once`` died with a Rich traceback when a GPU name or the
probe's stderr held ``[/x]``; OSC 52 (a clipboard write), OSC 0 (the window title), OSC 8 links and ``ESC[2J``
reached the terminal as they came.

What must hold now: the App keeps running; the text shows literally, ``[rank0]:`` and ``[/x]`` included; no
escape sequence (nor its payload) reaches the screen or the CLI's output; the commands exit normally."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.widgets import Label, Static
from textual.widgets._toast import Toast

from app.tui import PrimeTrainApp
from services.models import Pod, PodKind, PodState
from services.monitor.service import MonitorService
from services.pod.connection import Connection, ProbeStream
from services.watch.threads import Thread, compose
from tests.app.helpers import shown, wait_for
from tests.conftest import _make_server, cli_pod_home

REPO = Path(__file__).resolve().parents[2]
SIZE = (160, 50)

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # a clipboard write (its payload must not reach the screen either)
TITLE = "\x1b]0;pwned-title\x1b\\"
LINK = "\x1b]8;;https://evil.example/\x07"
CLEAR = "\x1b[2J\x1b[H"
PAYLOADS = ("ZWNobyBwd25lZA", "pwned-title", "evil.example")

GPU_NAME = f"NVIDIA [/x] H100{OSC52}{CLEAR}"
PROC = f"python [link=https://markup.example]train[/link]{TITLE}"
LOG_LINE = (
    f"trainer: [rank0]: {LINK}torch.OutOfMemoryError: CUDA out of memory while loading "
    f"[/workspace/ckpt/step_10] [@click=app.quit]go[/]"
)
STDERR = f"Traceback: [/x] broken {CLEAR}[bold]not bold{OSC52}"


def sample_line() -> bytes:
    return (
        json.dumps(
            {
                "v": 1,
                "t": time.time(),
                "source": "nvidia-smi",
                "gpus": [{"index": 0, "name": GPU_NAME, "util": 50, "mem_used": 1 << 30, "mem_total": 80 << 30}],
                "host": {"cpu_pct": 5.0},
                "procs": [{"pid": 42, "gpu": 0, "mem": 1 << 30, "cmd": PROC}],
                "log": [LOG_LINE],
                "errors": [f"nvml: [/x] {TITLE}"],
            }
        ).encode()
        + b"\n"
    )


class HostileStream(ProbeStream):
    """One hostile sample, then the end of the stream with a hostile stderr (the pod's reason)."""

    def __init__(self) -> None:
        self.lines = [sample_line()]

    async def readline(self) -> bytes:
        return self.lines.pop(0) if self.lines else b""

    def stderr_tail(self) -> str:
        return STDERR

    async def close(self) -> None:
        return None


class HostilePod(Connection):
    async def connect(self) -> None:
        return None

    async def start_probe(self, args):
        return HostileStream()

    async def close(self) -> None:
        return None

    async def run(self, command, timeout=30.0, input=None):  # the interface's name
        raise OSError("no shell here")

    async def start(self, command):
        raise OSError("no shell here")

    async def put_file(self, data, remote, mode=0o644):
        raise OSError("no files here")

    async def exists(self, remote):
        return False


def clean(text: str) -> None:
    """Nothing a terminal would act on, nor any sequence's payload."""
    assert not any(c in text for c in "\x1b\x07\x9b\x9c\x9d"), repr(text)
    assert not any(p in text for p in PAYLOADS), repr(text)


def toast_texts(app: PrimeTrainApp) -> list[str]:
    return [str(t.render()) for t in app.screen.query(Toast)]


async def test_the_app_shows_hostile_pod_text_literally_and_keeps_running(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path))
    pod = Pod(name="gpu1", kind=PodKind.SSH, host="10.0.0.1", run_dir="/runs/r1")
    app = PrimeTrainApp([pod], monitor_factory=lambda cb: MonitorService(cb, connector=lambda p: HostilePod(p)))
    async with app.run_test(size=SIZE, notifications=True) as pilot:  # toasts drawn, as in a terminal
        snap = lambda: app.snapshots.get("gpu1")  # noqa: E731
        await wait_for(
            pilot,
            lambda: (
                snap() is not None
                and snap().latest is not None
                and snap().status.state is PodState.OFFLINE
                and snap().alerts
            ),
        )
        await shown(pilot)
        await wait_for(pilot, lambda: any("CUDA out of memory" in t for t in toast_texts(app)))
        await pilot.pause(0.2)
        assert app.is_running and app.return_code is None

        # the alert's toast: the log line literally, markup and all
        toast = next(t for t in toast_texts(app) if "CUDA out of memory" in t)
        assert "[rank0]:" in toast and "[/workspace/ckpt/step_10]" in toast and "[@click=app.quit]go[/]" in toast
        clean(toast)
        # the Monitor pane: the state line (the probe's stderr), the GPU's name, its process, the probe errors
        # (the pod goes offline, reconnects a second later and goes offline again: the line is read while it says
        # offline, however long the checks above took on a loaded machine)
        state_line = app.query_one("#monitor-state", Static)
        await wait_for(pilot, lambda: "Traceback: [/x] broken [bold]not bold" in str(state_line.render()))
        state = str(state_line.render())
        models = str(app.query_one("#gpu-models", Label).render())
        assert "NVIDIA [/x] H100" in models, models
        procs = str(app.query_one("#gpu-procs", Label).render())
        assert "python [link=" in procs, procs
        errors = str(app.query_one("#monitor-errors", Label).render())
        assert "nvml: [/x]" in errors, errors
        tail = str(app.query_one("#log-tail").render())
        assert "[rank0]:" in tail and "[/workspace/ckpt/step_10]" in tail, tail
        for text in (state, models, procs, errors, tail):
            clean(text)

        # a provider's or an exception's message, toasted by the App and by a widget (which asks for markup)
        app.notify(f"RunPod said: [/x] {OSC52}quota", title=f"Renting failed {TITLE}", severity="error")
        app.query_one("#monitor-state", Static).notify(f"[@click=app.quit]x[/] {LINK}")
        await pilot.pause(0.3)
        texts = toast_texts(app)
        assert any("RunPod said: [/x] quota" in t for t in texts), texts
        assert any("[@click=app.quit]x[/]" in t for t in texts), texts
        for text in texts:
            clean(text)

        # nothing of it reaches the terminal: the whole screen as drawn
        screen = app.export_screenshot()
        clean(screen)
        assert app.is_running and app.return_code is None


def test_push_messages_carry_no_escape_sequence():
    th = Thread(
        "t1",
        "gpu1",
        "log:oom",
        f"CUDA out of memory{TITLE}",
        "critical",
        1.0,
        f"CUDA out of memory in the logs: {LOG_LINE} — lower the batch",
        run_dir="/r",
        step=3,
    )
    for kind in ("opened", "resolved"):
        msg = compose(kind, th, 5.0)
        clean(msg.title)
        clean(msg.body)
    assert "[/workspace/ckpt/step_10]" in compose("opened", th, 5.0).body


# -- the command line, against a real sshd pod whose probe says hostile things ----------------------------

# The pod's own Python environment (a sitecustomize.py on its PYTHONPATH) makes the real probe's text hostile:
# "sample" names the GPUs the fake nvidia-smi reports GPU_NAME; "stderr" makes the probe die with STDERR.
POD_SITE = """import os, sys
_mode = open({mode!r}).read().strip() if os.path.exists({mode!r}) else ""
if _mode == "sample":
    os.environ["PTT_FAKE_GPU_NAME"] = {name!r}
elif _mode == "stderr" and b"ptt-probe-go" in open("/proc/self/cmdline", "rb").read():
    sys.stderr.write({stderr!r} + "\\n")
    sys.stderr.flush()
    os._exit(3)
"""


@pytest.fixture(scope="module")
def cli_pod(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-text-pod")
    site, mode = root / "pod-site", root / "pod-mode"
    site.mkdir()
    (site / "sitecustomize.py").write_text(POD_SITE.format(mode=str(mode), name=GPU_NAME, stderr=STDERR))
    server = _make_server(root / "sshd", env={"PTT_FAKE_GPUS": "1", "PYTHONPATH": str(site)})
    server.start()
    env, _probe_dir = cli_pod_home(root, server)
    env["COLUMNS"] = "200"

    def plant(how: str) -> None:
        mode.write_text(how)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=90,
            stdin=subprocess.DEVNULL,
        )

    yield plant, run
    server.kill()


def test_probe_once_prints_hostile_gpu_names_literally(cli_pod):
    plant, run = cli_pod
    plant("sample")
    done = run("probe", "p1", "--once", "--timeout", "20")
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    assert "Traceback" not in err
    assert "NVIDIA [/x] H100" in out, out
    clean(out)
    clean(err)


@pytest.mark.parametrize("command", [("probe", "p1", "--once", "--timeout", "20"), ("status", "p1", "--timeout", "20")])
def test_hostile_probe_stderr_is_one_literal_line(cli_pod, command):
    plant, run = cli_pod
    plant("stderr")
    done = run(*command)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "Traceback (most recent call last)" not in err and "MarkupError" not in err, err
    assert done.returncode == 1, (out, err)
    assert "Traceback: [/x] broken [bold]not bold" in out + err, (out, err)
    clean(out)
    clean(err)
