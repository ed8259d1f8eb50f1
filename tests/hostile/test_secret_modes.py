"""Hardening item 10e: settings.toml holding provider API keys or notify URLs, and the providers' key files the
app reads (``~/.prime/config.json``, vast's key file), were used whatever their mode: readable by every user
on the machine without a word. Now the commands that use them and the app warn, as ssh does for a private
key, naming the file and its mode; a file readable by its owner alone, or one without secrets, is quiet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser, tui_app

REPO = Path(__file__).resolve().parents[2]
KEYS = '[offers]\nkeys = {vast = "vk-secret-5678"}\n'
URLS = '[notify]\nurls = ["ntfy://example.invalid/topic"]\n'


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(home / "cfg"),
        "PRIME_TRAIN_TUI_DATA_DIR": str(home / "data"),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=60, env=env
    )


@pytest.mark.parametrize("text", [KEYS, URLS], ids=["api keys", "notify urls"])
def test_a_readable_settings_toml_with_secrets_is_warned_about(tmp_path, text):
    (tmp_path / "cfg").mkdir()
    settings = tmp_path / "cfg" / "settings.toml"
    settings.write_text(text)
    settings.chmod(0o644)
    r = _cli(tmp_path, "rentals")
    assert r.returncode == 0, r.stderr
    [line] = r.stderr.splitlines()
    assert str(settings) in line and "can be read by group and other users (mode 644)" in line, line
    assert "vk-secret" not in r.stderr
    settings.chmod(0o600)
    r = _cli(tmp_path, "rentals")
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_settings_without_secrets_and_other_commands_stay_quiet(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "settings.toml").write_text("[offers]\ncache_ttl = 60\n")
    assert _cli(tmp_path, "rentals").stderr == ""
    (tmp_path / "cfg" / "settings.toml").write_text(KEYS)
    r = _cli(tmp_path, "validate", "--json", str(tmp_path / "none.toml"))  # uses no key: not its business
    assert "warning" not in r.stderr


def test_a_group_readable_provider_key_file_is_warned_about_in_the_app(tmp_path, monkeypatch):
    key = tmp_path / ".config" / "vastai" / "vast_api_key"
    key.parent.mkdir(parents=True)
    key.write_text("vk-secret-5678\n")
    key.chmod(0o640)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    args = build_parser([]).parse_args(["--no-local"])
    try:
        notices = tui_app(args)._notices
    finally:
        import gc

        gc.enable()  # tui_app turned it off for the App's start
    [notice] = [n for n in notices if "vast_api_key" in n]
    assert "can be read by its group (mode 640)" in notice and "vk-secret" not in notice
    key.chmod(0o600)
    try:
        assert not [n for n in tui_app(args)._notices if "vast_api_key" in n]
    finally:
        import gc

        gc.enable()


def test_the_watcher_says_what_it_left_out_and_which_secrets_others_can_read(tmp_path):
    """The headless watcher has no screen: a readable settings.toml with notify URLs and a pods.toml entry it
    leaves out are said once as JSON events (its stderr stays JSON lines), and the good pod is watched."""
    import json
    import signal
    import time

    from tests.conftest import free_port

    cfg = tmp_path / "cfg"
    cfg.mkdir()
    settings = cfg / "settings.toml"
    settings.write_text(URLS)
    settings.chmod(0o644)
    (cfg / "pods.toml").write_text(
        f'[pods.good]\nhost = "127.0.0.1"\nuser = "nobody"\nport = {free_port()}\n[pods.bad]\nhost = "a b"\n'
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PRIME_TRAIN_TUI_CONFIG_DIR": str(cfg),
        "PRIME_TRAIN_TUI_DATA_DIR": str(tmp_path / "data"),
        "PYTHONPATH": str(REPO),
    }
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "watch", "--json"], cwd=REPO, stdout=o, stderr=e, env=env
        )
        try:
            end = time.monotonic() + 60
            while "watch started" not in out.read_text() and proc.poll() is None and time.monotonic() < end:
                time.sleep(0.05)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, err.read_text()
    events = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    logs = [json.loads(line) for line in err.read_text().splitlines() if line.strip()]  # JSON lines only
    notices = [ev["message"] for ev in events if ev["event"] == "settings notice"]
    assert any(str(settings) in n and "mode 644" in n for n in notices), notices
    assert any("pods.bad" in n and "left out" in n for n in notices), notices
    assert "ntfy://example.invalid" not in out.read_text() + err.read_text()
    assert any(log.get("msg") == "settings notice" and log.get("level") == "warning" for log in logs)
    (started,) = [ev for ev in events if ev["event"] == "watch started"]
    assert "good" in json.dumps(started) and '"bad"' not in json.dumps(started)
