"""services/slurm/gpus.py against the real local Slurm (tests/services/slurm/conftest.py): a running 2-node job's
GPUs read node by node through the login node (``srun --overlap`` into the job, no SSH to the nodes), each
node's own figures (a fake nvidia-smi per node, tests/services/slurm/fake_gpus.py) and the prime-rl roles
running there; a node whose nvidia-smi is missing or has no driver says so on its own; srun's per-node
failures and garbage output are read without raising."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from services.models import Pod, PodKind
from services.pod.local import LocalConnection
from services.slurm.gpus import MARK, GpuReader, gpu_line, node_gpus, roles
from services.slurm.models import JobGpus, NodeGpus, SlurmJob
from tests.services.slurm.fake_gpus import GPUS, MIB, env_with, fake_bin, no_nvidia_smi_on, role_job

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("slurm")]


def reader(env: dict[str, str], timeout: float = 20.0) -> GpuReader:
    return GpuReader(LocalConnection(Pod(name="cluster", kind=PodKind.LOCAL), env=env), timeout=timeout)


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> Path:
    return fake_bin(tmp_path_factory.mktemp("gpubin"))


@pytest.fixture(scope="module")
def running_job(slurm, tmp_path_factory):
    """The 2-node role job, running on n1 and n2 (shared by this module's tests)."""
    job_id = role_job(slurm, tmp_path_factory.mktemp("rolejob"))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = slurm.run("squeue", "--noheader", "-j", job_id, "-o", "%T", check=False).stdout.strip()
            if state == "RUNNING":
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"job {job_id} not running within 30 s: {state!r}")
        yield SlurmJob(job_id, name="rl multi", state="RUNNING", nodelist="n[1-2]", nodes=("n1", "n2"))
    finally:
        slurm.run("scancel", job_id, check=False)
        slurm.wait_idle(["n1", "n2"])


async def read_until(r: GpuReader, job: SlurmJob, ready, what: str) -> JobGpus:
    """The job's GPUs once ``ready`` holds (its role processes take a moment to start), bounded."""
    deadline = time.monotonic() + 30
    got = None
    while time.monotonic() < deadline:
        got = await r.job(job, now=time.time())
        if ready(got):
            return got
        await asyncio.sleep(0.3)
    raise AssertionError(f"{what} within 30 s; last read: {got}")


async def test_both_nodes_gpus_and_roles_told_apart(slurm, running_job, bin_dir):
    r = reader(env_with(slurm.env, bin_dir))
    got = await read_until(
        r, running_job, lambda g: all(n.roles for n in g.nodes) and len(g.nodes) == 2, "roles on both nodes"
    )
    assert got.job_id == running_job.id and got.error == "" and got.checked_at is not None
    assert [n.node for n in got.nodes] == ["n1", "n2"]
    for node in got.nodes:
        count, name, total_mib = GPUS[node.node]
        assert node.error == ""
        assert [g.index for g in node.gpus] == list(range(count))
        assert {g.name for g in node.gpus} == {name}
        assert {g.mem_total for g in node.gpus} == {total_mib * MIB}
        for g in node.gpus:
            assert 0 <= g.util <= 100 and 0 < g.mem_used <= g.mem_total and g.power_w > 0 and g.temp_c > 0
    n1, n2 = got.nodes
    assert n1.roles == ("inference",)
    assert n2.roles == ("orchestrator", "trainer")
    assert r.overlap is True  # Slurm 22.05 here knows --overlap

    # a node the controller lost is not asked (srun would wait for it in vain); the others are read
    part = await r.job(running_job, down={"n2"})
    assert [(n.node, len(n.gpus), n.error) for n in part.nodes] == [
        ("n1", 2, ""),
        ("n2", 0, "n2 is not responding to Slurm"),
    ]


async def test_a_node_without_a_driver_and_nodes_without_nvidia_smi(slurm, running_job, bin_dir):
    # n2's nvidia-smi cannot reach its driver; n1 is read as usual
    broken = await reader(env_with(slurm.env, bin_dir, PTT_TEST_NO_DRIVER="n2")).job(running_job)
    n1, n2 = broken.nodes
    assert n1.error == "" and len(n1.gpus) == 2
    assert n2.gpus == () and n2.error == (
        "no NVIDIA driver on n2: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
    )

    # no nvidia-smi anywhere on the nodes' PATH
    env = env_with(slurm.env, None)
    assert no_nvidia_smi_on(env["PATH"])
    bare = await reader(env).job(running_job)
    assert bare.error == ""
    assert [(n.node, n.gpus, n.error) for n in bare.nodes] == [
        ("n1", (), "no NVIDIA driver on n1 (nvidia-smi is not installed there)"),
        ("n2", (), "no NVIDIA driver on n2 (nvidia-smi is not installed there)"),
    ]


async def test_a_job_that_is_not_running_is_the_jobs_error(slurm, bin_dir):
    r = reader(env_with(slurm.env, bin_dir))
    gone = await r.job(SlurmJob("999999", state="RUNNING", nodes=("n1",)))
    assert gone.nodes == ()
    assert gone.error == (
        "srun into job 999999 failed on cluster: Unable to confirm allocation for job 999999: Invalid job id specified"
    )
    bad = await r.job(SlurmJob("1; rm -rf /", state="RUNNING", nodes=("n1",)))
    assert bad.error == "not a Slurm job id: '1; rm -rf /'" and bad.nodes == ()
    assert await r.jobs([SlurmJob("5", state="PENDING")]) == ()


# ------------------------------------------------------------------------------- parsing (no Slurm)


def test_srun_failures_are_told_per_node():
    err = (
        "srun: error: Task launch for StepId=2.2 failed on node n2: Communication connection failure\n"
        "srun: error: Application launch failed: Communication connection failure\nsrun: Job step aborted\n"
    )
    out = (
        f"0: {MARK} node n1\n0: {MARK} gpus\n0: 0, NVIDIA H100 80GB HBM3, 50, 1024, 81559, 60, 300.5\n"
        f"0: {MARK} smi 0\n0: {MARK} procs\n0: {MARK} end\n"
    )
    n1, n2, n3 = node_gpus(out, err, ["n1", "n2", "n3"], timed_out=20)
    assert n1 == NodeGpus("n1", gpus=(gpu_line("0, NVIDIA H100 80GB HBM3, 50, 1024, 81559, 60, 300.5"),))
    assert n1.gpus[0].mem_used == 1024 * MIB and n1.gpus[0].util == 50 and n1.gpus[0].power_w == 300.5
    assert n2.error == "n2 could not be reached: Communication connection failure"
    assert n3.error == "n3 did not answer within 20 s"
    (only,) = node_gpus("", err, ["n1"])
    assert only.error == "n1 not read: srun could not start on n2"
    hung = node_gpus(
        f"0: {MARK} node n1\n0: {MARK} gpus\n0: {MARK} smi 124\n0: {MARK} end\n", "", ["n1"], smi_timeout=10
    )
    assert hung[0].error == "nvidia-smi on n1 did not answer within 10 s"
    cut = node_gpus(f"0: {MARK} node n1\n0: {MARK} gpus\n", "", ["n1"], timed_out=5)
    assert cut[0].error == "n1 stopped answering before its GPUs were read"


def test_roles_from_command_lines():
    assert roles(
        ["python -m vllm.entrypoints.openai.api_server --model x", "/usr/bin/srun uv run trainer @ t.toml"]
    ) == ("inference",)  # the launcher is not a role
    assert roles(["uv run sft @ sft.toml", "uv run orchestrator @ o.toml"]) == ("orchestrator", "trainer")
    assert roles(["/bin/sh /var/spool/slurmd/job01/slurm_script trainer", "sleep 300", ""]) == ()
    # a shell wrapping every role's branch is not a role; what it starts is
    assert roles(
        ["bash -c if [ $SLURM_NODEID = 0 ]; then uv run inference; else uv run trainer; fi", "uv run trainer @ t.toml"]
    ) == ("trainer",)
    # prime-rl's process titles say the role, whatever the arguments name: an env server whose arguments
    # mention the trainer's config is no trainer, the launcher and the env servers hold no GPU role
    assert roles(
        [
            "PRIME-RL::EnvServer @ /run/configs/envs/train/trainer-math.json",
            "PRIME-RL::Launcher rl @ rl.toml --trainer.model.name x",
            "PRIME-RL::Inference",
        ]
    ) == ("inference",)
    assert roles(["PRIME-RL::Trainer", "PRIME-RL::Orchestrator"]) == ("orchestrator", "trainer")
    assert gpu_line("0, H100, [N/A], [N/A], 81559, [Not Supported], [N/A]") == gpu_line(
        "0, H100, nan, -5, 81559, x, -1"
    )


LINE = st.one_of(
    st.text(max_size=60),
    st.sampled_from(
        [
            f"{MARK} node n1",
            f"{MARK} node ",
            f"{MARK} gpus",
            f"{MARK} smi 0",
            f"{MARK} smi x",
            f"{MARK} smi 99999999",
            f"{MARK} nosmi",
            f"{MARK} procs",
            f"{MARK} end",
            "0, NVIDIA H100, 87, 100, 81559, 70, 600",
            "1,,,,,,",
            "99999, a, 1e400, -1, 0, inf, nan",
            "uv run trainer",
            "srun vllm",
        ]
    ),
)
TASK_LINE = st.tuples(st.integers(min_value=0, max_value=3) | st.just(10**7), LINE).map(lambda t: f"{t[0]}: {t[1]}")


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(TASK_LINE | st.text(max_size=40), max_size=40),
    err=st.text(max_size=200),
    nodes=st.lists(st.text(max_size=8), max_size=4),
    timed_out=st.none() | st.floats(allow_nan=False),
)
def test_garbage_never_raises_and_every_node_is_reported(lines, err, nodes, timed_out):
    got = node_gpus("\n".join(lines), err, nodes, timed_out=timed_out)
    wanted = [n for n in dict.fromkeys(nodes) if n]
    assert [n.node for n in got[: len(wanted)]] == wanted
    for node in got:
        assert isinstance(node, NodeGpus) and node.node
        assert bool(node.error) != bool(node.gpus)  # GPUs, or why there are none
        assert set(node.roles) <= {"inference", "orchestrator", "trainer"}
        for g in node.gpus:
            assert 0 <= g.index < 10000 and len(g.name) <= 80
            assert g.util is None or 0 <= g.util <= 100
            assert g.mem_used is None or g.mem_used >= 0
            assert g.mem_total is None or g.mem_total > 0
