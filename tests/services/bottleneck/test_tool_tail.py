"""Tail percentiles of tool time per env (services/bottleneck/tail.py): a slow tail over generated traces
is its own finding and a normal spread is not; thresholds are data in rules.toml; end to end through the
real probe on a run dir the demo trainer wrote, and through ``profile --json``."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from services.bottleneck.analysis import analyze_lines
from services.bottleneck.report import to_markdown
from services.bottleneck.tail import percentile, thresholds, tool_tails
from services.monitor.metrics import EpisodeTiming, episode_timings

REPO = Path(__file__).resolve().parents[3]
PROBE = REPO / "services" / "pod" / "agent" / "probe.py"


def generated(
    env: str, n: int, seed: int, *, slow_share: float = 0.0, slow_x: float = 10.0, base: float = 4.0, steps: int = 5
) -> list[EpisodeTiming]:
    """``n`` episodes of one env spread over ``steps`` steps: tool seconds log-normal around ``base``
    (a normal spread), and ``slow_share`` of them (at random) ``slow_x`` times longer (a slow tail)."""
    r = random.Random(seed)
    slow = set(r.sample(range(n), round(n * slow_share)))
    out = []
    for i in range(n):
        tool = base * r.lognormvariate(0.0, 0.25) * (slow_x if i in slow else 1.0)
        out.append(EpisodeTiming(1 + i % steps, env, tool, 2.0, tool + 2.4))
    return out


@settings(max_examples=60, deadline=None, database=None)
@given(st.integers(0, 10_000), st.integers(60, 400))
def test_a_normal_spread_is_no_finding_and_a_slow_tail_is(seed: int, n: int) -> None:
    normal = generated("math", n, seed)
    tail = generated("code", n, seed + 1, slow_share=0.1)
    got = {t.env: t for t in tool_tails(normal + tail)}
    assert not got["math"].slow and got["code"].slow
    assert got["code"].p95 > 3 * got["code"].p50 and got["math"].p95 < 3 * got["math"].p50
    b = analyze_lines(episodes=normal + tail)
    assert [r.id for r in b.recommendations] == ["slow-tool-tail"]
    text = b.recommendations[0].text
    assert "in code:" in text and f"{got['code'].p50:.1f} s" in text and f"{got['code'].p95:.1f} s" in text
    assert "timeout on tool calls" in text and "math" not in text
    assert [t["env"] for t in b.to_json()["tool_tail"]] == ["code", "math"]  # slowest p95 first
    assert analyze_lines(episodes=normal).recommendations == ()


def test_percentiles_and_the_gates() -> None:
    values = sorted(float(v) for v in range(1, 101))
    assert percentile(values, 50) == pytest.approx(50.5) and percentile(values, 95) == pytest.approx(95.05)
    assert percentile([7.0], 95) == 7.0
    few = generated("code", 15, 3, slow_share=0.3)  # fewer episodes than min_episodes: no finding yet
    assert not tool_tails(few)[0].slow and tool_tails(few * 2)[0].slow
    fast = generated("code", 200, 3, slow_share=0.1, base=0.1)  # skewed, but a p95 of ~1 s is no finding
    assert tool_tails(fast)[0].p95 > 3 * tool_tails(fast)[0].p50 and not tool_tails(fast)[0].slow
    unmeasured = [EpisodeTiming(1, "code", None, 1.0, None)] * 50
    assert tool_tails(unmeasured) == ()  # an agent span that never ended is not a 0 s tool time
    nameless = tool_tails(generated("", 40, 1))
    assert nameless[0].label == "all envs" and nameless[0].to_json()["env"] is None


def test_only_the_profiled_steps_count() -> None:
    old = [EpisodeTiming(1, "code", 60.0, 1.0, 61.0)] * 10  # a slow start, before the window
    recent = generated("code", 100, 5, steps=5)  # steps 1..5
    window = [e for e in recent if e.step >= 3]
    assert tool_tails(old + recent, since_step=3)[0].episodes == len(window)
    assert tool_tails(old + recent, since_step=3)[0].max == max(e.tool_s for e in window)
    assert tool_tails(old + recent, until_step=2)[0].max == 60.0


def test_thresholds_are_data_in_rules_toml(tmp_path: Path) -> None:
    assert thresholds() == {"min_episodes": 20, "p95_over_p50": 3.0, "min_p95_s": 5.0}
    strict = tmp_path / "rules.toml"
    strict.write_text("[tool_tail]\nmin_p95_s = 500\n")
    eps = generated("code", 200, 9, slow_share=0.1)
    assert tool_tails(eps)[0].slow
    limits = thresholds(strict)
    assert limits["min_p95_s"] == 500.0 and limits["p95_over_p50"] == 3.0  # the others: their defaults
    assert not tool_tails(eps, limits=limits)[0].slow


def test_the_monitor_side_parser_skips_garbage() -> None:
    raw = [
        {"step": 3, "env": "math", "tool": 1.5, "model": 2.0, "total": 4.0},
        "x",
        None,
        [1],
        {"step": True, "env": "a", "tool": 1},
        {"step": -1, "tool": 1},
        {"step": 2**60, "tool": 1},
        {"step": 4, "env": 7, "tool": "slow", "model": float("nan"), "total": -3},
        {"step": 5, "env": "e" * 500, "tool": 1e400},
    ]
    assert episode_timings(raw) == [
        EpisodeTiming(3, "math", 1.5, 2.0, 4.0),
        EpisodeTiming(4, "", None, None, None),
        EpisodeTiming(5, "e" * 100, None, None, None),
    ]
    assert episode_timings({"step": 1}) == [] and episode_timings(None) == []


# ------------------------------------------------------------------------------------ end to end
def demo_run(run_dir: Path, profile: str, steps: int = 8) -> list[str]:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "services.demo.trainer",
            "--run-dir",
            str(run_dir),
            "--step-seconds",
            "0.001",
            "--max-steps",
            str(steps),
            "--profile",
            profile,
            "--seed",
            "0",
        ],
        cwd=REPO,
        check=True,
        timeout=30,
    )
    return (run_dir / "metrics.jsonl").read_text().splitlines()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    base = tmp_path_factory.mktemp("tail-runs")
    return {name: (base / name, demo_run(base / name, name)) for name in ("latency-bound", "generation-bound")}


def probe_traces(run_dir: Path) -> list[EpisodeTiming]:
    out = subprocess.run(
        [sys.executable, "-u", str(PROBE), "--once", "--backend", "none", "--run-dir", str(run_dir)],
        capture_output=True,
        timeout=30,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr.decode()
    sample = json.loads(out.stdout)
    assert "Reverse the text" not in out.stdout.decode()  # the demo's prompts stay on the pod
    return episode_timings(sample["traces"])


def test_the_demo_latency_profile_shows_a_slow_tail_through_the_real_probe(runs) -> None:
    run, metrics = runs["latency-bound"]
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == ["step_5", "step_6", "step_7", "step_8"]
    episodes = probe_traces(run)
    assert sorted({e.step for e in episodes}) == [7, 8] and len(episodes) == 32  # the newest 2 step dirs
    b = analyze_lines(metrics, last=5, episodes=episodes)
    assert b.diagnosis == "latency-bound"
    (tail,) = b.tool_tail
    assert tail.env == "reverse-text" and tail.slow and tail.episodes == 32
    assert "slow-tool-tail" in [r.id for r in b.recommendations]
    assert "| reverse-text |" in to_markdown(b) and "slow tail" in to_markdown(b)


def test_a_normal_demo_run_has_percentiles_but_no_finding(runs) -> None:
    run, metrics = runs["generation-bound"]
    b = analyze_lines(metrics, last=5, episodes=probe_traces(run))
    (tail,) = b.tool_tail
    assert tail.episodes == 32 and not tail.slow and tail.p95 < 3 * tail.p50
    assert "slow-tool-tail" not in [r.id for r in b.recommendations]


def test_profile_json_has_tool_tail(runs, tmp_path: Path) -> None:
    run, _ = runs["latency-bound"]
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "profile", "local", "--run-dir", str(run), "--steps", "5", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PRIME_TRAIN_TUI_CONFIG_DIR": str(tmp_path / "config")},
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (tail,) = doc["tool_tail"]
    assert set(tail) == {"env", "episodes", "p50_s", "p95_s", "max_s", "slow"}
    assert tail["env"] == "reverse-text" and tail["slow"] is True and tail["p95_s"] > 3 * tail["p50_s"]
    assert "slow-tool-tail" in doc["recommendation_ids"]
    human = subprocess.run(
        [sys.executable, "-m", "app.cli", "profile", "local", "--run-dir", str(run)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PRIME_TRAIN_TUI_CONFIG_DIR": str(tmp_path / "config")},
    )
    assert human.returncode == 0, human.stderr
    assert "Tool time per episode" in human.stdout and "SLOW TAIL" in human.stdout
