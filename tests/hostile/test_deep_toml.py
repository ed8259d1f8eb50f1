"""Issue 13 item 6: a TOML nested ~500 levels (1 KB) as pods.toml / settings.toml / backup.toml, opened in the
Config pane or given to ``validate``, raised RecursionError everywhere; a 200 KB config froze the Config pane
for over a minute in syntax highlighting. Now one loader (services/tomlfile.py) reads every settings file
with one error policy — a SettingsError naming the file, the line and what to do — ``validate`` exits 2 with
one line, and the Config pane opens big or deep files at once (no highlighting, and it says so)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import load_health_settings, load_lifecycle_settings, load_offer_settings, load_pods
from services.backup.s3 import load_backup_settings
from services.errors import SettingsError

REPO = Path(__file__).resolve().parents[2]
DEEP = "x = " + "[" * 500 + "]" * 500 + "\n"  # 1 KB
DEEP_INLINE = "x = " + "{a = " * 300 + "1" + "}" * 300 + "\n"
DEEP_TABLES = "[" + ".".join(["a"] * 500) + "]\nx = 1\n"  # no recursion in tomllib, 500 levels of data

LOADERS = {
    "pods.toml": load_pods,
    "settings.toml [lifecycle]": load_lifecycle_settings,
    "settings.toml [offers]": load_offer_settings,
    "settings.toml [health]": load_health_settings,
    "backup.toml": lambda path: load_backup_settings(path, env={}),
}


@pytest.mark.parametrize("text", [DEEP, DEEP_INLINE, DEEP_TABLES], ids=["arrays", "inline tables", "tables"])
@pytest.mark.parametrize("loader", list(LOADERS))
def test_every_settings_loader_refuses_deep_toml_with_the_file_and_line(tmp_path, loader, text):
    path = tmp_path / loader.split()[0]
    path.write_text("# my settings\n" + text)
    with pytest.raises(SettingsError) as info:
        LOADERS[loader](path)
    message = str(info.value)
    assert str(path) in message and "nested deeper than 64 levels" in message and "line 2" in message, message
    assert info.value.hint


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "PRIME_TRAIN_TUI_CONFIG_DIR": str(cwd / "cfg"),
            "PRIME_TRAIN_TUI_DATA_DIR": str(cwd / "data"),
            "HOME": str(cwd),
        },
    )


@pytest.mark.parametrize("text", [DEEP, DEEP_INLINE, DEEP_TABLES], ids=["arrays", "inline tables", "tables"])
def test_validate_exits_2_with_one_line(tmp_path, text):
    deep = tmp_path / "deep.toml"
    deep.write_text(text)
    r = cli("validate", str(deep), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    [line] = r.stderr.splitlines()
    assert str(deep) in line and "nested deeper than 64 levels" in line
    r = cli("validate", "--json", str(deep), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr == "" and "nested deeper" in r.stdout


def test_a_deep_pods_toml_is_one_line_for_the_commands_and_a_notice_for_the_tui(tmp_path, monkeypatch):
    from app.cli import build_parser, tui_pods

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "pods.toml").write_text(DEEP)
    r = cli("status", "gpu", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "nested deeper" in r.stderr.splitlines()[0]
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "cfg"))
    pods, warnings = tui_pods(build_parser().parse_args([]))
    assert [p.name for p in pods] == ["local"] and "nested deeper" in warnings[0]
    assert (tmp_path / "cfg" / "pods.toml").read_text() == DEEP  # untouched


def test_offers_for_a_deep_config_is_one_line_too(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text(DEEP)
    r = cli("offers", "--config", str(deep), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    [line] = r.stderr.splitlines()
    assert str(deep) in line and "nested deeper than 64 levels" in line
