"""The launch's compute-node check read from what its task printed (services.lifecycle.slurm_launch), for the
cases the local test cluster cannot produce: a run dir the node does not see, no node free, a refused task,
a node with GPUs. The live case (a node that runs the task and sees the run dir) is in test_launch.py."""

from __future__ import annotations

from services.lifecycle import preflight as pf
from services.lifecycle.slurm_launch import node_check_result

RUN = "/shared/runs/rl"
GPUS = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b2c)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-3d4e)\n"


def test_a_node_with_gpus_that_sees_the_run_dir_passes():
    c = node_check_result(0, f"@@ptt node gpu07\n@@ptt shared yes\n{GPUS}", "", RUN)
    assert c.status == pf.OK and c.detail == "gpu07 runs tasks, sees the run dir, 2 x NVIDIA H100 80GB HBM3"


def test_a_run_dir_off_the_shared_filesystem_fails_and_says_where_to_put_it():
    c = node_check_result(0, f"@@ptt node gpu07\n@@ptt shared no\n{GPUS}", "", RUN)
    assert c.status == pf.FAIL and c.detail.startswith(f"the run dir {RUN} is not visible from compute node gpu07")
    assert "shared filesystem" in c.fix


def test_no_node_free_in_time_is_only_a_warning():
    err = "srun: error: Unable to allocate resources: Immediate execution impossible, insufficient priority\n"
    c = node_check_result(1, "", err, RUN)
    assert c.status == pf.WARN and c.detail.startswith("no compute node was free within")
    assert "Immediate execution impossible" in c.detail


def test_a_refused_task_fails_with_slurms_words():
    err = "srun: error: Unable to allocate resources: Invalid account or account/partition combination specified\n"
    c = node_check_result(1, "", err, RUN)  # "Unable to allocate" as for a busy cluster, but a refusal
    assert c.status == pf.FAIL and c.detail.endswith("Invalid account or account/partition combination specified")
    c = node_check_result(1, "", "srun: error: invalid partition specified: gpu\n", RUN)
    assert c.status == pf.FAIL
    assert c.detail == "a task could not run on a compute node: srun: error: invalid partition specified: gpu"


def test_a_node_without_gpus_warns():
    c = node_check_result(0, "@@ptt node cpu01\n@@ptt shared yes\nNo devices were found\n", "", RUN)
    assert c.status == pf.WARN and "listed no GPU" in c.detail
