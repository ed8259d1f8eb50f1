"""A Slurm login node in the real app (Pilot): the Monitor pane shows the user's jobs as a table (state,
nodes, elapsed / limit, a pending job's reason in words) and a line of node states when the pod's snapshot
carries a cluster, the error first when Slurm did not answer, the real reason when there are no jobs, and
nothing of it for a pod without a cluster; the fleet table says "2 jobs, 1 node down". Snapshots are
hand-made (as the monitor builds them: the alerts from services.slurm.health.judge) and fed through the App's
own ``on_snapshot``, the monitor's pods parked on a connection that never completes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from app.screens.fleet import FleetScreen
from services.models import Pod, PodKind, PodSnapshot, PodState, PodStatus
from services.slurm.health import judge
from services.slurm.models import ClusterView, SlurmJob, SlurmNode
from tests.app.helpers import parked_app, shown
from widgets.alerts import AlertList
from widgets.cluster_view import ClusterPanel
from widgets.fleet_view import FleetView

NOW = 1_700_000_000.0
SIZE = (150, 45)
CLUSTER = Pod(name="mycluster", kind=PodKind.SSH, host="login.example.org", scheduler="slurm")
PLAIN = Pod(name="h100", kind=PodKind.SSH, host="10.0.0.9")

JOBS = (
    SlurmJob(
        "4711",
        name="rl multi",
        state="RUNNING",
        nodelist="n[1-2]",
        nodes=("n1", "n2"),
        elapsed_s=754,
        time_limit_s=4 * 3600,
        submit_time=NOW - 800,
        start_time=NOW - 754,
    ),
    SlurmJob("4712", name="sft next", state="PENDING", reason="Resources", time_limit_s=3600, submit_time=NOW - 60),
)
NODES = (SlurmNode("n1", "MIXED"), SlurmNode("n2", "MIXED+NOT_RESPONDING"))


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PRIME_TRAIN_TUI_CONFIG_DIR", str(tmp_path / "config"))


def cluster_snapshot(view: ClusterView) -> PodSnapshot:
    alerts = tuple(judge(view.jobs, view.nodes, NOW)) if not view.error else ()
    return PodSnapshot(
        pod=CLUSTER,
        status=PodStatus(PodState.ONLINE, "via nvidia-smi", since=NOW - 60),
        last_received=NOW,
        alerts=alerts,
        cluster=view,
    )


def plain_text(widget) -> str:
    return str(widget.render())


async def test_monitor_pane_shows_the_clusters_jobs_and_nodes() -> None:
    app = parked_app([CLUSTER, PLAIN], NOW)
    async with app.run_test(size=SIZE) as pilot:
        view = ClusterView(jobs=JOBS, nodes=NODES, checked_at=NOW)
        app.on_snapshot(cluster_snapshot(view))
        app.on_snapshot(PodSnapshot(pod=PLAIN, status=PodStatus(PodState.ONLINE, "", since=NOW), last_received=NOW))
        app.pod_list.select("mycluster")
        await shown(pilot)
        pane = app.monitor_pane
        panel = pane.query_one(ClusterPanel)
        assert panel.display
        assert panel.rows == [
            ("4711", "rl multi", "running", "n1, n2", "12 min 34 s / 4 h 0 min", ""),
            ("4712", "sft next", "pending", "—", "not started / 1 h 0 min", "the nodes it asks for are busy"),
        ]
        nodes = plain_text(panel.query_one("#cluster-nodes"))
        assert nodes == "Nodes: n1 ok, n2 NOT RESPONDING"
        assert not panel.query_one("#cluster-note").display
        alerts = pane.query_one(AlertList)
        assert "Node n2 is not responding" in plain_text(alerts)

        # Slurm stops answering: the error first, the last look's jobs kept below it
        failed = replace(view, error="squeue on mycluster did not answer within 20 s", error_at=NOW)
        app.on_snapshot(cluster_snapshot(failed))
        await shown(pilot)
        note = panel.query_one("#cluster-note")
        assert note.display
        assert plain_text(note).startswith("Slurm did not answer (since ")
        assert "squeue on mycluster did not answer within 20 s. Jobs and nodes below are from 0 s ago." in plain_text(
            note
        )
        assert len(panel.rows) == 2

        # no jobs at all: the real reason
        app.on_snapshot(cluster_snapshot(ClusterView(nodes=NODES[:1], checked_at=NOW)))
        await shown(pilot)
        assert plain_text(note) == (
            "No Slurm jobs of yours on this cluster (none pending, running or ended in the last minutes)."
        )
        assert not panel.query_one("#cluster-jobs").display
        assert plain_text(panel.query_one("#cluster-nodes")) == "Nodes: n1 ok"

        # a pod without a cluster shows none of it
        app.pod_list.select("h100")
        await shown(pilot)
        assert pane.pod_name == "h100" and not panel.display

        app.on_snapshot(cluster_snapshot(view))
        await shown(pilot)
        await pilot.press("o")
        assert isinstance(app.screen, FleetScreen)
        table = app.screen.query_one(FleetView)
        await shown(pilot)
        assert str(table.get_cell("mycluster", "alerts")).startswith("2 jobs, 1 node down · ")
        assert "Node n2 is not responding" in str(table.get_cell("mycluster", "alerts"))
        assert str(table.get_cell("h100", "alerts")) == ""
