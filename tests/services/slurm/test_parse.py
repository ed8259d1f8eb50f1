"""services/slurm/parse.py: what Slurm's commands print, read by pure parsers that never raise on garbage
(only SlurmOutputError for a document that cannot be read at all) and always hand out well-formed jobs and
nodes; plus the shapes of both JSON generations (22.05 and 23.02+) and the text fallbacks."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings, strategies as st

from services.slurm import parse
from services.slurm.models import UNKNOWN, SlurmJob, SlurmNode, SlurmOutputError

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=30,
)
JOB_KEYS = [
    "job_id",
    "array_job_id",
    "array_task_id",
    "job_state",
    "state_reason",
    "name",
    "nodes",
    "time_limit",
    "submit_time",
    "start_time",
    "end_time",
    "user_name",
    "state",
    "time",
    "array",
    "user",
]
RAW_JOB = st.dictionaries(st.sampled_from(JOB_KEYS), JSON, max_size=len(JOB_KEYS))


def well_formed(job: SlurmJob) -> None:
    assert isinstance(job, SlurmJob)
    assert job.id and re.fullmatch(r"[0-9][0-9_+\[\]\-%,]*", job.id) and len(job.id) <= 64
    assert job.state and job.state == job.state.upper() and " " not in job.state
    for d in (job.elapsed_s, job.time_limit_s):
        assert d is None or (isinstance(d, int) and 0 <= d <= 10**10)
    for t in (job.submit_time, job.start_time, job.end_time):
        assert t is None or 0 < t <= 253402300799.0
    assert isinstance(job.name, str) and len(job.name) <= 1000 and len(job.user) <= 64
    assert isinstance(job.nodes, tuple)


@settings(max_examples=300, deadline=None)
@given(
    jobs=st.lists(RAW_JOB | JSON, max_size=6),
    extra=st.dictionaries(st.text(max_size=8), JSON, max_size=3),
    now=st.none() | st.floats(allow_nan=True, allow_infinity=True),
)
def test_json_parsers_hand_out_well_formed_jobs_whatever_the_records_hold(jobs, extra, now):
    doc = json.dumps({**extra, "jobs": jobs})
    for parsed in (parse.squeue_json(doc, now if now is None or now == now else None), parse.sacct_json(doc)):
        for job in parsed:
            well_formed(job)


@settings(max_examples=300, deadline=None)
@given(out=st.text(max_size=400) | JSON.map(json.dumps))
def test_no_parser_raises_anything_but_a_clear_output_error(out):
    for reader in (parse.squeue_json, parse.sacct_json):
        try:
            jobs = reader(out)
        except SlurmOutputError as e:
            assert str(e).startswith(("squeue --json", "sacct --json"))
        else:
            for job in jobs:
                well_formed(job)
    for reader in (parse.squeue_format, parse.sacct_parsable, parse.scontrol_jobs):
        for job in reader(out):
            well_formed(job)
    for node in parse.scontrol_nodes(out):
        assert isinstance(node, SlurmNode) and node.name and not any(c.isspace() for c in node.name)
        assert node.state and node.state == node.state.upper()
    for part in parse.nodelist_parts(out):
        assert part and not any(c.isspace() for c in part)
    assert all(h and " " not in h for h in parse.hostnames(out))


@settings(max_examples=300, deadline=None)
@given(
    fields=st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=25),
        min_size=10,
        max_size=12,
    )
)
def test_text_lines_of_any_fields_parse_or_are_skipped(fields):
    line = "|".join(fields)
    for job in parse.squeue_format(line) + parse.sacct_parsable(line):
        well_formed(job)


def test_slurm_22_05_squeue_json():
    doc = json.dumps(
        {
            "jobs": [
                {
                    "job_id": 41,
                    "name": "rl | qwen",
                    "job_state": "RUNNING",
                    "state_reason": "None",
                    "nodes": "gpu[01-02]",
                    "time_limit": 120,
                    "submit_time": 1700000000,
                    "start_time": 1700000060,
                    "end_time": 1700007260,
                    "user_name": "ana",
                    "array_job_id": 0,
                    "array_task_id": None,
                },
                {
                    "job_id": 42,
                    "name": "queued",
                    "job_state": "PENDING",
                    "state_reason": "Resources",
                    "nodes": "",
                    "time_limit": 4294967295,
                    "submit_time": 1700000100,
                    "start_time": 0,
                    "end_time": 0,
                },
                {"job_id": "not a job"},
                "garbage",
                None,
            ],
            "errors": [],
        }
    )
    running, pending = parse.squeue_json(doc, now=1700000160.0)
    assert (running.id, running.name, running.state, running.reason) == ("41", "rl | qwen", "RUNNING", "")
    assert running.nodelist == "gpu[01-02]" and running.elapsed_s == 100 and running.time_limit_s == 7200
    assert running.end_time is None and running.user == "ana"
    assert parse.squeue_json(doc, now=float("inf"))[0].elapsed_s is None  # a garbage clock is no elapsed time
    assert (pending.state, pending.reason, pending.start_time, pending.elapsed_s) == (
        "PENDING",
        "Resources",
        None,
        None,
    )


def test_slurm_23_squeue_json_with_set_infinite_numbers_and_state_lists():
    doc = json.dumps(
        {
            "jobs": [
                {
                    "job_id": 7,
                    "array_job_id": {"set": True, "number": 5},
                    "array_task_id": {"set": True, "number": 2},
                    "job_state": ["CANCELLED", "COMPLETING"],
                    "time_limit": {"set": True, "infinite": True, "number": 0},
                    "start_time": {"set": True, "number": 1700000000},
                    "end_time": {"set": False, "number": 0},
                },
                {"job_id": 8, "job_state": ["NODE_FAIL"], "time_limit": {"set": True, "infinite": False, "number": 30}},
            ]
        }
    )
    array_task, failed = parse.squeue_json(doc, now=1700000050)
    assert array_task.id == "5_2" and array_task.state == "COMPLETING" and not array_task.finished
    assert array_task.time_limit_s is None and array_task.elapsed_s == 50
    assert failed.state == "NODE_FAIL" and failed.finished and failed.time_limit_s == 1800


def test_an_error_document_says_slurms_reason():
    doc = json.dumps({"jobs": [], "errors": [{"error": "Unable to contact slurm controller", "error_number": 1}]})
    with pytest.raises(SlurmOutputError, match="reported an error: Unable to contact slurm controller"):
        parse.squeue_json(doc)
    with pytest.raises(SlurmOutputError, match="not JSON"):
        parse.sacct_json("sacct: error: Problem talking to the database")


def test_squeue_text_keeps_a_name_with_the_separator_and_reads_times_in_utc():
    line = "12|RUNNING|None|1-02:03:04|2:00:00|2023-11-14T22:13:20|2023-11-14T22:14:20|n[1-2]|ana|a|b|c"
    (job,) = parse.squeue_format(line + "\nnot|enough|fields\n")
    assert job.name == "a|b|c" and job.elapsed_s == 93784 and job.time_limit_s == 7200
    assert job.submit_time == 1700000000 and job.start_time == 1700000060 and job.nodelist == "n[1-2]"
    (held,) = parse.squeue_format("13|PENDING|JobHeldUser|0:00|UNLIMITED|2023-11-14T22:13:20|N/A|||held")
    assert (held.state, held.reason, held.time_limit_s, held.start_time, held.elapsed_s) == (
        "PENDING",
        "JobHeldUser",
        None,
        None,
        None,
    )


def test_sacct_text_skips_job_steps_and_reads_a_cancelled_by_state():
    out = (
        "30|CANCELLED by 1000|None|n1|65|10|2023-11-14T22:13:20|2023-11-14T22:13:25|2023-11-14T22:14:30|ana|x\n"
        "30.batch|CANCELLED||n1|65||2023-11-14T22:13:20|2023-11-14T22:13:25|2023-11-14T22:14:30||batch\n"
    )
    (job,) = parse.sacct_parsable(out)
    assert (job.id, job.state, job.elapsed_s, job.time_limit_s, job.finished) == ("30", "CANCELLED", 65, 600, True)


def test_scontrol_records_keep_values_with_spaces():
    out = (
        "NodeName=n1 Arch=x86_64 State=IDLE+NOT_RESPONDING Reason=Not responding [slurm@2023-11-14T22:13:20]\n"
        "NodeName=n2 State=mixed Reason=(null)\n"
        "NodeName=has space State=IDLE\n"
    )
    n1, n2 = parse.scontrol_nodes(out)
    assert n1.flags == ("NOT_RESPONDING",) and not n1.responding and n1.reason.startswith("Not responding [slurm@")
    assert (n2.state, n2.reason, n2.responding) == ("MIXED", "", True)
    (job,) = parse.scontrol_jobs(
        "JobId=9 JobName=my run 1 UserId=ana(1000) JobState=TIMEOUT Reason=TimeLimit "
        "RunTime=00:10:00 TimeLimit=00:10:00 SubmitTime=2023-11-14T22:13:20 NodeList=n2"
    )
    assert (job.name, job.user, job.state, job.elapsed_s, job.finished) == ("my run 1", "ana", "TIMEOUT", 600, True)


# scontrol show job -o from Debian's Slurm 22.05 (cut after Partition=): job 2, another user's, is named
# "x JobId=1 UserId=root(0) JobState=COMPLETED" to pass for job 1
SPOOFED = (
    "JobId=1 JobName=mine UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) "
    "QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 "
    "ExitCode=0:0 RunTime=00:00:07 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-27T10:39:44 "
    "EligibleTime=2026-11-27T10:39:44 StartTime=2026-11-27T10:39:45 EndTime=Unknown NodeList=n1 BatchHost=n1\n"
    "JobId=2 JobName=x JobId=1 UserId=root(0) JobState=COMPLETED UserId=nobody(65534) GroupId=nogroup(65534) "
    "MCS_label=N/A Priority=0 Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=JobHeldUser "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 "
    "TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-27T10:39:45 EligibleTime=Unknown StartTime=Unknown "
    "EndTime=Unknown NodeList= WorkDir=/tmp/a JobId=1 ArrayJobId=1 ArrayTaskId=3\n"
)


def test_a_job_name_that_holds_fields_does_not_override_the_real_ones():
    mine, theirs = parse.scontrol_jobs(SPOOFED)
    assert (mine.id, mine.name, mine.state, mine.user, mine.elapsed_s) == ("1", "mine", "RUNNING", "root", 7)
    # the name runs to its UserId=; ids printed later (the name, a path) are text, not the job's
    assert (theirs.id, theirs.name, theirs.state, theirs.user) == ("2", "x JobId=1", "PENDING", "nobody")
    (task,) = parse.scontrol_jobs("JobId=12 ArrayJobId=11 ArrayTaskId=1 JobName=a b UserId=u(1) JobState=RUNNING")
    assert (task.id, task.name, task.user) == ("11_1", "a b", "u")


def test_values_and_node_lists():
    assert parse.nodelist_parts("gpu[01-02,05],cpu7, (null)") == ["gpu[01-02,05]", "cpu7"]
    assert parse.duration("2-00:00:01") == 172801 and parse.duration("UNLIMITED") is None
    assert parse.state("") == UNKNOWN and parse.state(42) == UNKNOWN and parse.state("new_state") == "NEW_STATE"
    assert parse.state(["REQUEUED", "RUNNING"]) == "REQUEUED"
    assert parse.job_id(True) == "" and parse.job_id(12.0) == "12" and parse.job_id("12; rm -rf /") == ""
