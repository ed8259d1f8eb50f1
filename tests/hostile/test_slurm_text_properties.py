"""Property test of Slurm's parsers on arbitrary text: what a login node prints (squeue, sacct, scontrol,
their JSON) is parsed into jobs and nodes or refused with a SlurmOutputError, never an exception.

It was broken: a duration of 5,000 digits (``RunTime=999...9:00``) made Python's ``int`` refuse the string
(its 4,300-digit limit) and the ValueError escaped the parser. Every number the parsers read is now bounded
in digits, and one out of range reads as unknown."""

from __future__ import annotations

import os
import tempfile

# hypothesis keeps caches in ./.hypothesis unless told otherwise: not in the shared working tree
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "ptt-hypothesis"))

from hypothesis import HealthCheck, example, given, settings, strategies as st

from services.slurm import parse
from services.slurm.models import SlurmOutputError

FAST = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

LONG = "9" * 5000
# the pieces Slurm's output is made of, and runs of digits past any limit: where the parsers read numbers
PIECES = st.one_of(
    st.sampled_from(
        [
            "JobId=",
            " JobName=",
            " UserId=u(1)",
            " JobState=",
            "RUNNING",
            "PENDING",
            " RunTime=",
            " TimeLimit=",
            " SubmitTime=",
            " StartTime=",
            " EndTime=",
            " ArrayJobId=",
            " ArrayTaskId=",
            " NodeName=",
            " State=",
            " Reason=",
            "NodeList=",
            "|",
            "-",
            ":",
            ".",
            "T",
            "\n",
            " ",
            "2024-01-02T03:04:05",
            "UNLIMITED",
            '{"jobs":[',
            "]}",
            '{"job_id":',
            ',"time_limit":',
            '{"set":true,"infinite":false,"number":',
            "}",
            ",",
            '"',
            "1e308",
            "-1",
            "NaN",
        ]
    ),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.text(max_size=8),
)
SLURMISH = st.lists(PIECES, max_size=40).map("".join)
PARSERS = (
    parse.squeue_format,
    parse.sacct_parsable,
    parse.scontrol_jobs,
    parse.scontrol_nodes,
    parse.hostnames,
    parse.squeue_json,
    parse.sacct_json,
)


@FAST
@given(SLURMISH | st.text(max_size=300))
@example(f"JobId=1 JobName=x UserId=u(1) JobState=RUNNING RunTime={LONG}:00 TimeLimit=1:00")
@example(f"1|RUNNING|None|{LONG}:00|{LONG}-00:00:00|N/A|N/A|n|u|x")
@example(f"1|RUNNING|None|n|{LONG}|{LONG}|N/A|N/A|N/A|u|x")
@example('{"jobs":[{"job_id":1,"time_limit":' + LONG[:4000] + ',"array_task_id":' + LONG[:4000] + "}]}")
def test_no_slurm_parser_raises_on_any_text(out):
    for parser in PARSERS:
        try:
            jobs = parser(out)
        except SlurmOutputError:
            continue
        for job in jobs:
            for d in (getattr(job, "elapsed_s", None), getattr(job, "time_limit_s", None)):
                assert d is None or 0 <= d <= 10**10


def test_a_duration_past_the_digit_limit_is_unknown():
    (job,) = parse.scontrol_jobs(f"JobId=1 JobName=x UserId=u(1) JobState=RUNNING RunTime={LONG}:00 TimeLimit=1:00:00")
    assert job.elapsed_s is None and job.time_limit_s == 3600
    assert parse.duration("9" * 13 + ":00") is None and parse.duration("1-00:00:00") == 86400
    assert parse.seconds(LONG) is None and parse.number("1" * 100) is None
