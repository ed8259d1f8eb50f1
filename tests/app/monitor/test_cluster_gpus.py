"""A Slurm login node's running jobs' GPUs in the real app (Pilot), at 80 columns: the Monitor pane shows a line
per node of each running job (roles, GPU count, use, memory used / total, hottest GPU, power), a node whose
GPUs could not be read with its reason first, a job not read yet or whose nodes could not be asked at all
saying so, and nothing of it for jobs that do not run. Snapshots are hand-made (as the monitor builds them)
and fed through the App's own ``on_snapshot``; the monitor's pods are parked on a connection that never
completes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from services.models import GpuSample, Pod, PodKind, PodSnapshot, PodState, PodStatus
from services.slurm.models import ClusterView, JobGpus, NodeGpus, SlurmJob, SlurmNode
from tests.app.helpers import parked_app, shown
from widgets.cluster_view import ClusterPanel

NOW = 1_700_000_000.0
SIZE = (80, 50)
MIB = 1024 * 1024
CLUSTER = Pod(name="mycluster", kind=PodKind.SSH, host="login.example.org", scheduler="slurm")


def h100(i: int, util: float, used_mib: int, temp: float, power: float) -> GpuSample:
    return GpuSample(
        index=i,
        name="NVIDIA H100 80GB HBM3",
        util=util,
        mem_used=used_mib * MIB,
        mem_total=81559 * MIB,
        power_w=power,
        temp_c=temp,
    )


RUNNING = SlurmJob(
    "4711",
    name="rl multi",
    state="RUNNING",
    nodelist="n[1-3]",
    nodes=("n1", "n2", "n3"),
    elapsed_s=754,
    time_limit_s=4 * 3600,
    start_time=NOW - 754,
)
OTHER = SlurmJob("4713", name="sft", state="RUNNING", nodelist="n4", nodes=("n4",), elapsed_s=30, time_limit_s=600)
PENDING = SlurmJob("4712", name="sft next", state="PENDING", reason="Resources", time_limit_s=3600)
NODES = tuple(SlurmNode(f"n{i}", "MIXED") for i in range(1, 5))
GPUS = JobGpus(
    "4711",
    checked_at=NOW,
    nodes=(
        NodeGpus("n1", roles=("inference",), gpus=(h100(0, 90, 62000, 71, 600), h100(1, 84, 63000, 75, 610))),
        NodeGpus(
            "n2",
            roles=("orchestrator", "trainer"),
            gpus=tuple(h100(i, 95 if i else 10, 70000, 60, 500) for i in range(4)),
        ),
        NodeGpus(
            "n3",
            roles=("trainer",),
            error="no NVIDIA driver on n3: NVIDIA-SMI has failed because it couldn't "
            "communicate with the NVIDIA driver",
        ),
    ),
)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))


def snapshot(view: ClusterView) -> PodSnapshot:
    return PodSnapshot(
        pod=CLUSTER,
        status=PodStatus(PodState.ONLINE, "via nvidia-smi", since=NOW - 60),
        last_received=NOW,
        cluster=view,
    )


async def test_monitor_pane_shows_each_nodes_gpus_at_80_columns() -> None:
    app = parked_app([CLUSTER], NOW)
    async with app.run_test(size=SIZE) as pilot:
        view = ClusterView(jobs=(RUNNING, OTHER, PENDING), nodes=NODES, checked_at=NOW, gpus=(GPUS,))
        app.on_snapshot(snapshot(view))
        app.pod_list.select("mycluster")
        await shown(pilot)
        panel = app.monitor_pane.query_one(ClusterPanel)
        box = panel.query_one("#cluster-gpus")
        assert panel.display and box.display
        lines = str(box.render()).splitlines()
        assert box.content_region.width == 60  # the pane beside the pod list at 80 columns
        assert lines == [
            "Job 4711 GPUs (rl multi):",
            "  n1: inference · 2 GPUs 87% 122/159 GiB 75°C 1210 W",
            "  n2: orch+train · 4 GPUs 74% 273/319 GiB 60°C 2000 W",  # shortened to fit
            "  n3 (trainer): no NVIDIA driver on n3: NVIDIA-SMI has failed because it couldn't communicate with "
            "the NVIDIA driver",
            "Job 4713: reading its nodes' GPUs…",
        ]
        # what is drawn fits the pane: the node lines as they are, the long error wrapped whole below its start
        drawn = [box.render_line(y).text.rstrip() for y in range(box.size.height)]
        assert all(len(line) <= 60 for line in drawn)
        assert drawn[:3] == lines[:3] and drawn[-1] == lines[4]
        assert drawn[3].startswith("  n3 (trainer): no NVIDIA driver on n3: NVIDIA-SMI has")
        assert " ".join(drawn[3:-1]) == lines[3]

        # a wider terminal: the full roles and the lagging GPU
        await pilot.resize_terminal(150, 50)
        await pilot.pause()
        assert (
            str(box.render()).splitlines()[2]
            == "  n2: orchestrator, trainer · 4 GPUs 74% (min 10%) 273/319 GiB 60°C 2000 W"
        )

        # the job's nodes could not be asked at all: the reason, for that job
        failed = JobGpus(
            "4713", error="srun into job 4713 failed on mycluster: Job/step already completing", checked_at=NOW
        )
        app.on_snapshot(snapshot(replace(view, gpus=(GPUS, failed))))
        await shown(pilot)
        assert str(box.render()).splitlines()[-1] == (
            "Job 4713: GPUs not read: srun into job 4713 failed on mycluster: Job/step already completing"
        )

        # no running job: no GPU lines
        app.on_snapshot(snapshot(ClusterView(jobs=(PENDING,), nodes=NODES, checked_at=NOW)))
        await shown(pilot)
        assert not box.display and panel.rows[0][0] == "4712"


def test_the_fleet_row_shows_the_running_jobs_gpus_for_a_login_node_without_its_own() -> None:
    from widgets.fleet_view import COLUMN_KEYS, fleet_row
    from widgets.format import NA

    view = ClusterView(jobs=(RUNNING, OTHER, PENDING), nodes=NODES, checked_at=NOW, gpus=(GPUS,))
    cells = fleet_row(snapshot(view))
    # n1's 2 GPUs and n2's 4 (n3 could not be read): (90 + 84 + 10 + 95 * 3) / 6 = 78 %
    assert str(cells[COLUMN_KEYS.index("util")]) == "78% ×6"
    assert str(cells[COLUMN_KEYS.index("alerts")]).startswith("3 jobs")
    # before the GPUs are read: the login node's own (none), as before
    assert fleet_row(snapshot(replace(view, gpus=())))[COLUMN_KEYS.index("util")] == NA
