"""``prime-train-tui rollouts``: its JSON (docs/json.md#rollouts---json) over a real sshd pod and on the demo pod,
one episode with ``--episode``, an export only where asked, and one clear line for bad input."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from app.cli import main
from app.settings import data_dir
from services.demo.pod import DemoPod
from tests.services.monitor.test_rollouts import SECRET_PROMPT, record, write_step


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    broken = record(7, 4)
    broken["ok"], broken["errors"] = False, [{"type": "ToolError", "message": "search timed out"}]
    write_step(run, 7, [record(7, i) for i in range(4)] + [broken], tail=b'{"id":"e7-5","env":')
    return run


def test_list_json_over_sshd(pod, run, capsys) -> None:
    spec = f"{pod.user}@127.0.0.1:{pod.port}"
    code, out, err = cli(capsys, "rollouts", spec, "--run-dir", str(run), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["step"] == 7 and doc["kind"] == "train" and doc["total"] == 5 and doc["partial"] is True
    assert [e["id"] for e in doc["episodes"]] == [f"e7-{i}" for i in range(5)]
    e = doc["episodes"][4]
    assert e["error"] == "ToolError: search timed out" and e["ok"] is False
    assert set(e) >= {
        "id",
        "step",
        "env",
        "reward",
        "rewards",
        "turns",
        "tokens_in",
        "tokens_out",
        "truncated",
        "tool_calls",
        "tools",
        "tool_s",
        "model_s",
        "total_s",
        "offset",
        "bytes",
    }
    assert SECRET_PROMPT not in out
    code, out, _ = cli(capsys, "rollouts", spec, "--run-dir", str(run), "--errors", "--json")
    assert [x["id"] for x in json.loads(out)["episodes"]] == ["e7-4"]
    code, out, _ = cli(capsys, "rollouts", spec, "--run-dir", str(run), "--episode", "e7-2", "--json")
    view = json.loads(out)
    assert code == 0 and view["id"] == "e7-2" and view["traces"][0]["turns"][1]["role"] == "user"
    assert f"{SECRET_PROMPT} 2" in out


def test_bad_input_is_one_line(run, capsys, tmp_path) -> None:
    code, _, err = cli(capsys, "rollouts", "local", "--run-dir", str(run), "--limit", "0")
    assert code == 2 and err.strip() == "prime-train-tui: --limit must be between 1 and 2000"
    code, _, err = cli(capsys, "rollouts", "local", "--run-dir", str(run), "--step", "3")
    assert code == 1 and err.startswith("prime-train-tui: no train episodes of step 3 (the steps with some: 7)")
    code, _, err = cli(capsys, "rollouts", "local", "--run-dir", str(run), "--grep", "(")
    assert code == 1 and "not a regular expression" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(capsys, "rollouts", "local", "--run-dir", str(run), "--episode", "missing")
    assert code == 1 and "no episode missing in step 7" in err


def test_export_writes_only_the_file_asked_for(run, capsys, tmp_path) -> None:
    target = tmp_path / "exports" / "e7-1.md"
    code, out, err = cli(
        capsys, "rollouts", "local", "--run-dir", str(run), "--episode", "e7-1", "--export", str(target)
    )
    assert code == 0, err
    assert f"wrote episode e7-1 to {target}" in out
    assert "## Episode e7-1" in target.read_text()
    code, out, _ = cli(capsys, "rollouts", "local", "--run-dir", str(run), "--export", str(tmp_path / "s.jsonl"))
    assert code == 0 and "wrote 5 episodes" in out
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 5


def test_demo_pod_writes_prime_rl_episodes(tmp_path, monkeypatch, capsys) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))
    demo = DemoPod(root=data_dir() / "demo-pod")
    try:
        code, out, err = cli(capsys, "rollouts", "demo", "--json", "--limit", "16")
        assert code == 0, err
        doc = json.loads(out)
        envs = {e["env"] for e in doc["episodes"]}
        assert envs == {"reverse-text", "wiki-search"} and len(doc["episodes"]) == 16
        assert any(e["tool_calls"] for e in doc["episodes"]) and len({e["reward"] for e in doc["episodes"]}) > 3
    finally:
        demo.stop_runs(signal.SIGKILL, wait=5.0)
