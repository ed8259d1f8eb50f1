"""The headless command line against a real sshd: one probe line, clear one-line failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.cli import build_parser, main, tui_pods
from services.models import PodKind

MIB = 1024 * 1024


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.ssh
def test_probe_once_json_prints_one_correct_sample(sshd, client_home, capsys):
    client_home.trust()
    code, out, err = run_cli(capsys, "probe", f"{sshd.user}@127.0.0.1:{sshd.port}", "--once", "--json")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 1
    sample = json.loads(lines[0])
    # one object per GPU (docs/json.md), although the probe sends one list per field
    assert sample["v"] == 1 and sample["source"] == "nvidia-smi" and len(sample["gpus"]) == 8
    g = sample["gpus"][0]
    assert set(g) == {"index", "name", "util", "mem_used", "mem_total", "power_w", "temp_c"} and g["index"] == 0
    # the fake prints MiB like the real nvidia-smi: the probe reports bytes
    assert g["mem_total"] == 81559 * MIB and g["mem_used"] % MIB == 0
    assert 0 <= g["util"] <= 100 and 50 < g["power_w"] < 800 and 20 < g["temp_c"] < 100
    host = sample["host"]
    assert 0 <= host["cpu_pct"] <= 100 and 0 < host["mem_used"] < host["mem_total"]
    assert 0 < host["disk_used"] < host["disk_total"] and host["nofile_soft"] > 0


@pytest.mark.ssh
def test_probe_never_trusts_a_new_host_key_headless(sshd, client_home, capsys):
    code, out, err = run_cli(capsys, "probe", f"{sshd.user}@127.0.0.1:{sshd.port}", "--once", "--json")
    assert code == 1 and out == ""
    first = err.splitlines()[0]
    assert "unknown host key" in first and "SHA256:" in first
    assert not client_home.known_hosts.exists()


@pytest.mark.ssh
def test_probe_auth_failure_is_one_line(sshd, client_home, capsys, tmp_path):
    client_home.trust()
    client_home.write_ssh_config(identity=tmp_path / "absent")
    code, _, err = run_cli(capsys, "probe", "testpod", "--once", "--json")
    assert code == 1 and err.startswith("prime-train-tui: authentication failed")


def test_probe_unreachable_and_bad_spec(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path))
    code, _, err = run_cli(capsys, "probe", "root@127.0.0.1:1", "--once", "--json")
    assert code == 1 and "connection refused" in err
    code, _, err = run_cli(capsys, "probe", "not a pod", "--once")
    assert code == 2 and "not a pod" in err


def test_probe_demo_and_local_headless(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path))
    code, out, _ = run_cli(capsys, "probe", "demo", "--once", "--json", "--interval", "0.2")
    assert code == 0 and len(json.loads(out)["gpus"]) == 8
    code, out, _ = run_cli(capsys, "probe", "local", "--once")
    assert code == 0 and "host: CPU" in out


def test_tui_pod_list_merges_sources_and_survives_a_broken_pods_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path))
    (tmp_path / "pods.toml").write_text('[pods.a]\nhost = "10.0.0.1"\n')
    args = build_parser().parse_args(["--demo", "--pod", "a", "--pod", "u@b:2222"])
    pods, warnings = tui_pods(args)
    assert [p.name for p in pods] == ["demo", "a", "u@b:2222", "local"] and warnings == []
    assert pods[0].kind is PodKind.DEMO and pods[1].saved
    (tmp_path / "pods.toml").write_text("[pods.a\n")
    pods, warnings = tui_pods(build_parser().parse_args([]))
    assert [p.name for p in pods] == ["local"] and "not valid TOML" in warnings[0]
    assert (tmp_path / "pods.toml").read_text() == "[pods.a\n"  # untouched


def test_console_entry_point_runs():
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "--help"], capture_output=True, text=True, env={**os.environ}, check=True
    ).stdout
    assert "probe" in out and "--demo" in out
    assert "start a training run on a pod (pre-flight first)" in out  # every command's summary, not only names


def test_the_parser_imports_only_the_command_it_runs():
    """Starting the TUI imports no command module; a command imports its own alone, and still parses."""
    script = (
        "import sys\n"
        "from app.cli import build_parser\n"
        "def loaded(): return sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
        "                            if m.startswith('app.commands.') and m != 'app.commands._support')\n"
        "a = build_parser(['--demo']).parse_args(['--demo'])\n"
        "print(a.demo, a.command, loaded())\n"
        "argv = ['--pod', 'x', 'estimate', '--model', 'Qwen/Qwen3-4B', '--gpus', '2']\n"
        "a = build_parser(argv).parse_args(argv)\n"
        "print(a.command, a.gpus, a.pod, loaded())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["True None []", "estimate 2 ['x'] ['estimate']"]
    bad = subprocess.run([sys.executable, "-m", "app.cli", "bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'bogus'" in bad.stderr and "'watch'" in bad.stderr


def test_a_closed_pipe_ends_quietly() -> None:
    """`prime-train-tui status --json | head`: the reader has gone when we write. Made certain here by
    running the CLI with stdout on a pipe whose read end is already closed: exit 1, no traceback."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    from tests.shared_data import CONFIG_FIXTURES

    fixture = CONFIG_FIXTURES / "configs__basic__alphabet-sort__rl.toml"
    script = (
        "import os, sys\n"
        "r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
        "from app.cli import main\n"
        f"rc = main(['validate', '--json', {str(fixture)!r}])\n"
        "sys.stderr.write(f'rc={rc}')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.stderr == "rc=1", proc.stderr
