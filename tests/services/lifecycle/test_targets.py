"""services.lifecycle.targets: the run target a pod's kind picks (the front-ends never ask the kind), and the
lifecycle's events, whose kind is one of a fixed set the front-ends render."""

from __future__ import annotations

import pytest

from services.lifecycle.events import EVENT_KINDS, Event
from services.lifecycle.targets import SingleHost, SlurmCluster, target_for
from services.models import Pod, PodKind


def test_a_slurm_login_node_is_a_cluster_target_and_any_other_pod_one_machine():
    cluster = Pod(name="hpc", kind=PodKind.SSH, host="login", scheduler="slurm")
    assert type(target_for(cluster)) is SlurmCluster
    for pod in (
        Pod(name="gpu", kind=PodKind.SSH, host="h"),
        Pod(name="local", kind=PodKind.LOCAL),
        Pod(name="demo", kind=PodKind.DEMO),
    ):
        assert type(target_for(pod)) is SingleHost
    assert not SlurmCluster.restores_from_bucket and SingleHost.restores_from_bucket


def test_an_event_of_an_unknown_kind_is_refused():
    assert EVENT_KINDS == {"check", "step", "progress", "warn", "done", "error"}
    assert Event("kill", "done", "ok").kind == "done"
    with pytest.raises(ValueError, match="unknown event kind 'finished'"):
        Event("kill", "finished", "ok")  # type: ignore[arg-type]


def test_what_the_front_ends_ask_a_pod_instead_of_its_kind():
    """The commands and the monitor ask the pod (host rules, billing by uptime, a simulated run), never its kind."""
    ssh, local, demo = (
        Pod("gpu", kind=PodKind.SSH, host="h"),
        Pod("local", kind=PodKind.LOCAL),
        Pod("demo", kind=PodKind.DEMO),
    )
    assert [p.host_rules for p in (ssh, local, demo)] == [True, True, False]
    assert [p.billed_since_boot for p in (ssh, local, demo)] == [True, False, False]
    assert [p.simulated for p in (ssh, local, demo)] == [False, False, True]


def test_a_launch_plan_says_itself_for_the_dialog_and_the_command_line(tmp_path):
    from pathlib import Path

    from services.lifecycle.preflight import LifecycleSettings
    from services.lifecycle.targets import LaunchPlan

    settings = LifecycleSettings(command="uv run rl @ {config}")
    pod = Pod(name="gpu", kind=PodKind.SSH, host="h", run_dir="/runs/a")
    plan = target_for(pod).plan_launch(pod, Path("rl.toml"), None, settings)
    assert isinstance(plan, LaunchPlan)
    assert plan.doc == {"pod": "gpu", "config": "rl.toml", "run_dir": "/runs/a", "command": "uv run rl @ {config}"}
    assert plan.lines == ("Launch rl.toml on gpu", "run dir: /runs/a", "command: uv run rl @ {config}")
    assert plan.text == (
        "Launch rl.toml on gpu\nrun dir: /runs/a\ncommand: uv run rl @ {config}\n"
        "Pre-flight checks run first; a failed one stops the launch."
    )
    cluster = Pod(name="hpc", kind=PodKind.SSH, host="login", scheduler="slurm")
    plan = target_for(cluster).plan_launch(cluster, Path("rl.toml"), "/scratch/r", settings, command="rl @ {config}")
    assert plan.lines[0] == "Launch rl.toml on the Slurm cluster hpc" and plan.doc["command"] == "rl @ {config}"
    assert "submits the job" in plan.text and plan.doc["run_dir"] == "/scratch/r"
