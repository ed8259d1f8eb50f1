"""services/slurm/cluster.py against a real local Slurm (tests/services/slurm/conftest.py: munged, slurmctld,
slurmd n1 and n2 on 127.0.0.1) through a LocalConnection, as it would run on a login node: a running job with
its node(s), elapsed time and time limit, held jobs pending with their reason, a cancelled job leaving the
running list and still known as CANCELLED (no accounting database here: sacct says so and the controller is
asked instead), another user's job named to pass for mine (``x JobId=<mine> ...``) not standing in for it, a
2-node job listing both nodes, the text fallbacks of Slurm versions without JSON, errors that say why, and a
killed slurmd seen as a node not responding."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from services.slurm.cluster import SlurmCluster
from services.slurm.models import SlurmError, SlurmJob

# one worker runs them all against one cluster (scripts/test.sh: --dist loadgroup)
pytestmark = [pytest.mark.timeout(90), pytest.mark.xdist_group("slurm")]

WAIT_S = 30


async def wait_for_job(cluster: SlurmCluster, job_id: str, state: str, **kw) -> SlurmJob:
    deadline = time.monotonic() + WAIT_S
    seen = None
    while time.monotonic() < deadline:
        seen = next((j for j in await cluster.jobs(**kw) if j.id == job_id), None)
        if seen is not None and seen.state == state:
            return seen
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job_id} not {state} within {WAIT_S} s: {seen}")


@pytest.fixture
async def cluster(slurm):
    async with slurm.connection() as conn:
        yield SlurmCluster(conn)


@pytest.fixture
def cancel_after(slurm):
    ids: list[str] = []
    yield ids.append
    if ids:
        slurm.run("scancel", *ids, check=False)


async def test_running_job_shows_its_node_elapsed_and_time_limit(slurm, cluster, cancel_after):
    job_id = slurm.sbatch("--job-name=ptt train | run 1", "--time=10", "--wrap", "sleep 120")
    cancel_after(job_id)
    job = await wait_for_job(cluster, job_id, "RUNNING")
    assert cluster.squeue_json is True  # Debian's Slurm 22.05 has squeue --json
    assert job.name == "ptt train | run 1"
    assert len(job.nodes) == 1 and job.nodes[0] in ("n1", "n2") and job.nodelist == job.nodes[0]
    assert job.time_limit_s == 600
    assert job.elapsed_s is not None and 0 <= job.elapsed_s < 60
    assert job.submit_time and job.start_time and job.submit_time <= job.start_time <= time.time() + 1
    assert job.reason == "" and not job.pending and not job.finished

    # a Slurm without JSON: the same job read from squeue's text output
    text = SlurmCluster(cluster.conn)
    text.squeue_json = False
    same = next(j for j in await text.jobs() if j.id == job_id)
    assert (same.name, same.state, same.nodes, same.time_limit_s) == (job.name, "RUNNING", job.nodes, 600)
    assert same.start_time == job.start_time and same.submit_time == job.submit_time
    assert same.elapsed_s is not None and same.elapsed_s >= job.elapsed_s


async def test_held_and_deferred_jobs_are_pending_with_their_reason(slurm, cluster, cancel_after):
    held = slurm.sbatch("--hold", "--job-name=held", "--wrap", "sleep 1")
    later = slurm.sbatch("--begin=now+1hour", "--job-name=later", "--wrap", "sleep 1")
    cancel_after(held)
    cancel_after(later)
    jobs = {j.id: j for j in await cluster.jobs()}
    assert jobs[held].state == "PENDING" and jobs[held].reason == "JobHeldUser"
    assert jobs[later].state == "PENDING" and jobs[later].reason == "BeginTime"
    for job in (jobs[held], jobs[later]):
        assert job.pending and job.nodes == () and job.elapsed_s is None and job.start_time is None

    text = SlurmCluster(cluster.conn)
    text.squeue_json = False
    jobs = {j.id: j for j in await text.jobs()}
    assert (jobs[held].state, jobs[held].reason, jobs[held].nodes) == ("PENDING", "JobHeldUser", ())
    assert (jobs[later].state, jobs[later].reason) == ("PENDING", "BeginTime")


async def test_cancelled_job_leaves_the_running_list_and_reads_cancelled(slurm, cluster):
    job_id = slurm.sbatch("--job-name=to-cancel", "--wrap", "sleep 120")
    await wait_for_job(cluster, job_id, "RUNNING")
    slurm.run("scancel", job_id)
    deadline = time.monotonic() + WAIT_S
    while any(j.id == job_id for j in await cluster.jobs()) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert job_id not in {j.id for j in await cluster.jobs()}

    states = await cluster.job_states([job_id, "999999"])
    assert cluster.accounting is False  # no slurmdbd here: sacct says so, the controller answers
    assert set(states) == {job_id}
    assert states[job_id].state == "CANCELLED" and states[job_id].finished
    assert states[job_id].name == "to-cancel" and states[job_id].elapsed_s is not None
    recent = {j.id: j for j in await cluster.jobs(finished_too=True)}
    assert recent[job_id].state == "CANCELLED"


async def test_another_users_job_named_like_mine_cannot_stand_in_for_it(slurm, cluster, cancel_after):
    # scontrol's text output names a job "JobName=<anything>": another user could call theirs
    # "x JobId=<mine> ..." and, read key by key, their record became my job (their state, their name)
    mine = slurm.sbatch("--job-name=mine", "--wrap", "sleep 120")
    cancel_after(mine)
    await wait_for_job(cluster, mine, "RUNNING")
    spoof = slurm.run(
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sbatch",
        "--parsable",
        "--hold",
        f"--job-name=x JobId={mine} UserId=root(0) JobState=COMPLETED",
        "--chdir=/tmp",
        "--output=/dev/null",
        "--wrap",
        "sleep 1",
    ).stdout.strip()
    cancel_after(spoof)
    listed = slurm.run("scontrol", "show", "job", "-o").stdout
    assert f"JobId={spoof} JobName=x JobId={mine} " in listed  # the shape the parser meets
    states = await cluster.job_states([mine])
    assert set(states) == {mine}
    assert (states[mine].state, states[mine].name) == ("RUNNING", "mine")


async def test_two_node_job_lists_both_nodes(slurm, cluster, cancel_after):
    job_id = slurm.sbatch("--nodes=2", "--job-name=multi", "--wrap", "sleep 120")
    cancel_after(job_id)
    job = await wait_for_job(cluster, job_id, "RUNNING")
    assert job.nodelist == "n[1-2]"
    assert job.nodes == ("n1", "n2")


async def test_hostnames_expands_many_lists_in_one_go(cluster):
    got = await cluster.hostnames(["n[1-2]", "n2,n1", "gpu[01-03],cpu7", "rack[1-2]-gpu[1-2]", ""])
    assert got == {
        "n[1-2]": ("n1", "n2"),
        "n2,n1": ("n2", "n1"),
        "gpu[01-03],cpu7": ("gpu01", "gpu02", "gpu03", "cpu7"),
        "rack[1-2]-gpu[1-2]": ("rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"),
        "": (),
    }


OLD_SQUEUE = """#!/bin/sh
# Slurm before 21.08 (or built without its JSON plugins): squeue rejects --json
for a in "$@"; do
  if [ "$a" = "--json" ]; then echo "squeue: unrecognized option '--json'" >&2; exit 1; fi
done
exec {real} "$@"
"""


async def test_squeue_without_json_is_detected_and_the_text_form_used(slurm, tmp_path: Path, cancel_after):
    import shutil

    from services.pod.local import LocalConnection

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(OLD_SQUEUE.format(real=shutil.which("squeue")))
    (bin_dir / "squeue").chmod(0o755)
    job_id = slurm.sbatch("--hold", "--job-name=old-slurm", "--wrap", "sleep 1")
    cancel_after(job_id)
    conn = LocalConnection(slurm.connection().pod, env={**slurm.env, "PATH": f"{bin_dir}:/usr/bin:/bin"})
    async with conn:
        old = SlurmCluster(conn)
        jobs = {j.id: j for j in await old.jobs()}
        assert old.squeue_json is False
        assert jobs[job_id].name == "old-slurm" and jobs[job_id].reason == "JobHeldUser"


async def test_errors_say_why(slurm, tmp_path: Path):
    from services.pod.local import LocalConnection

    pod = slurm.connection("login").pod
    async with LocalConnection(pod, env={"PATH": str(tmp_path)}) as conn:
        with pytest.raises(SlurmError, match="squeue is not installed on login"):
            await SlurmCluster(conn).jobs()
    # a controller that is not there: Slurm's own reason comes through
    conf = tmp_path / "slurm.conf"
    conf.write_text(slurm.conf.read_text().replace("SlurmctldHost=localhost", "SlurmctldHost=ptt-no-such-host"))
    async with LocalConnection(pod, env={"SLURM_CONF": str(conf)}) as conn:
        with pytest.raises(SlurmError, match=r"^scontrol show node failed on login: .+") as err:
            await SlurmCluster(conn, timeout=20).nodes()
    assert "exited with status" not in str(err.value)


async def test_killed_slurmd_shows_its_node_not_responding(slurm, cluster):
    nodes = {n.name: n for n in await cluster.nodes()}
    assert set(nodes) == {"n1", "n2"} and all(n.responding for n in nodes.values())
    slurm.kill_node("n2")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            nodes = {n.name: n for n in await cluster.nodes()}
            if not nodes["n2"].responding:
                break
            await asyncio.sleep(0.5)
        assert not nodes["n2"].responding, nodes["n2"]
        assert "NOT_RESPONDING" in nodes["n2"].flags or nodes["n2"].base_state == "DOWN"
        assert nodes["n1"].responding
    finally:
        slurm.start_node("n2")
        slurm.wait_idle(["n1", "n2"])
