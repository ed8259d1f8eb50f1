"""Alerts → threads of messages (services/watch/threads.py), pure, with an injected clock: one "opened" and
one "resolved" per alert, no duplicates while it stands, a flap within resolve_after_s is the same thread,
a flapping rule is rate-limited (hypothesis: never more than one opening per pod and rule per
min_interval_s, and a "resolved" only for a thread whose opening went out), escalation, min_severity,
quiet hours, a restart that does not announce an open alert twice, and the message's content."""

from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "ptt-hypothesis"))

from hypothesis import HealthCheck, given, settings, strategies as st

from services.models import Alert, RunProgress, Severity
from services.monitor.health import HealthSettings, default_patterns, log_alert, match_line, no_progress_alert
from services.watch.threads import AlertBook, Policy, QuietHours, Thread, compose, split_fix

T0 = 1_700_000_000.0


def alert(rule: str = "no-progress", severity: Severity = Severity.CRITICAL) -> Alert:
    return Alert(
        rule,
        severity,
        "No training progress",
        "No new step for 5 min (last: step 12). Look at the logs. "
        "If it is stuck, kill it and resume from the last complete checkpoint.",
        since=T0,
    )


def pushed(events, kind=None):
    return [e.message for e in events if e.message is not None and (kind is None or e.message.kind == kind)]


def test_an_alert_opens_once_resolves_once_and_a_short_flap_is_the_same_thread():
    book = AlertBook(Policy(resolve_after_s=60, min_interval_s=600))
    out = []
    for i in range(30):  # it stands for 30 evaluations: one message
        out += book.update("p1", [alert()], T0 + i, step=12, run_dir="/r")
    assert [m.kind for m in pushed(out)] == ["opened"]
    out = []
    for i in range(30, 60):  # clear for 30 s (< 60): not resolved yet
        out += book.update("p1", [], T0 + i)
    out += book.update("p1", [alert()], T0 + 60)  # back: the same thread, a flap
    assert pushed(out) == [] and book.open[("p1", "no-progress")].flaps == 1
    for i in range(61, 200):
        out += book.update("p1", [], T0 + i)
    assert [m.kind for m in pushed(out)] == ["resolved"]
    th = book.history[-1]
    assert th.resolved == T0 + 61 and th.messages == 2 and not book.open


def test_other_pods_evaluations_never_clear_a_pods_alert():
    book = AlertBook(Policy(resolve_after_s=5))
    book.update("p1", [alert()], T0)
    for i in range(1, 20):
        assert book.update("p2", [], T0 + i) == []
    assert ("p1", "no-progress") in book.open


def test_an_unknown_state_keeps_the_threads_open():
    book = AlertBook(Policy(resolve_after_s=5))
    book.update("p1", [alert()], T0)
    for i in range(1, 100):
        assert book.update("p1", [], T0 + i, keep_absent=True) == []
    assert ("p1", "no-progress") in book.open


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.booleans(), st.integers(1, 400)), min_size=1, max_size=120),
    st.sampled_from([0.0, 30.0, 120.0]),
)
def test_a_flapping_rule_is_rate_limited(pattern, resolve_after):
    """Whatever the rule does (present/absent, any gaps), per pod and rule: at most one opening per
    min_interval_s, every "resolved" follows an "opened" of its thread, and messages never pile up."""
    interval = 1800.0
    book = AlertBook(Policy(min_interval_s=interval, resolve_after_s=resolve_after))
    now, msgs = T0, []
    for present, gap in pattern:
        now += gap
        msgs += [(now, m) for m in pushed(book.update("p1", [alert()] if present else [], now))]
    opens = [t for t, m in msgs if m.kind == "opened"]
    assert all(b - a >= interval for a, b in zip(opens, opens[1:])), opens
    opened_tids = set()
    for _, m in msgs:
        if m.kind == "opened":
            assert m.tid not in opened_tids  # one opening per thread
            opened_tids.add(m.tid)
        elif m.kind == "resolved":
            assert m.tid in opened_tids
    span = now - T0
    assert len(msgs) <= 2 * (span // interval + 1)


def test_fifty_flaps_in_half_an_hour_send_two_messages():
    book = AlertBook(Policy(min_interval_s=1800, resolve_after_s=30))
    msgs = []
    for i in range(50):  # on for 5 s, off for 31 s, fifty times (each a thread of its own) within 30 min
        msgs += pushed(book.update("p1", [alert()], T0 + 36 * i))
        msgs += pushed(book.update("p1", [], T0 + 36 * i + 5))
        msgs += pushed(book.update("p1", [], T0 + 36 * i + 35))
    assert [m.kind for m in msgs] == ["opened", "resolved"]
    assert book.opened_total[("p1", "no-progress")] == 50


def test_escalation_is_one_message_in_the_same_thread():
    book = AlertBook(Policy())
    first = pushed(book.update("p1", [alert("disk", Severity.WARNING)], T0))
    again = pushed(book.update("p1", [alert("disk", Severity.WARNING)], T0 + 1))
    up = pushed(book.update("p1", [alert("disk", Severity.CRITICAL)], T0 + 2))
    same = pushed(book.update("p1", [alert("disk", Severity.CRITICAL)], T0 + 3))
    assert [m.kind for m in first] == ["opened"] and again == [] and same == []
    assert [m.kind for m in up] == ["escalated"] and up[0].tid == first[0].tid
    assert up[0].body.startswith("Now critical.")


def test_below_min_severity_nothing_is_pushed_and_its_resolution_is_silent():
    book = AlertBook(Policy(min_severity=Severity.CRITICAL, resolve_after_s=0))
    events = book.update("p1", [alert("nofile", Severity.WARNING)], T0)
    assert pushed(events) == [] and "below min_severity critical" in events[0].held
    events = book.update("p1", [], T0 + 1)
    assert [e.kind for e in events] == ["resolved"] and pushed(events) == []


def test_quiet_hours_hold_warnings_not_criticals():
    lt = time.localtime(T0)
    minute = lt.tm_hour * 60 + lt.tm_min
    quiet = QuietHours(minute, (minute + 60) % 1440)  # T0 is inside
    assert quiet.contains(T0) and not quiet.contains(T0 + 2 * 3600)
    book = AlertBook(Policy(quiet=quiet))
    assert pushed(book.update("p1", [alert("disk", Severity.WARNING)], T0)) == []
    assert [m.kind for m in pushed(book.update("p2", [alert()], T0))] == ["opened"]
    later = pushed(book.update("p1", [alert("disk", Severity.WARNING)], T0 + 2 * 3600))  # quiet hours over
    assert [m.kind for m in later] == ["opened"]


def test_quiet_hours_parse_and_wrap():
    q = QuietHours.parse("22:00-07:30")
    assert (q.start, q.end, str(q)) == (22 * 60, 7 * 60 + 30, "22:00-07:30")
    for bad in ("22-7", "25:00-07:00", "22:00", "", "22:00-07:60"):
        try:
            QuietHours.parse(bad)
        except ValueError as exc:
            assert "quiet_hours" in str(exc)
        else:
            raise AssertionError(bad)


def test_a_restart_does_not_announce_an_open_alert_again_and_still_resolves_it():
    book = AlertBook(Policy(resolve_after_s=10))
    assert pushed(book.update("p1", [alert()], T0))
    saved = [Thread.from_json(th.to_json()) for th in book.threads()]
    again = AlertBook(Policy(resolve_after_s=10))
    again.restore(saved)
    assert pushed(again.update("p1", [alert()], T0 + 100)) == []
    again.update("p1", [], T0 + 101)
    assert [m.kind for m in pushed(again.update("p1", [], T0 + 120))] == ["resolved"]


def test_the_message_has_the_pod_run_step_evidence_and_the_fix():
    a = no_progress_alert(RunProgress(step=12, step_time_s=0.2), T0, T0 + 400, HealthSettings())
    assert a is not None
    book = AlertBook(Policy())
    (msg,) = pushed(book.update("p1", [a], T0 + 400, step=12, run_dir="/workspace/run"))
    assert msg.title == "[OPENED] p1: No training progress"
    assert "pod p1 · run /workspace/run · step 12" in msg.body
    assert "No new step for 6 min (last: step 12" in msg.body
    assert "Fix: If it is stuck, kill it and resume from the last complete checkpoint." in msg.body
    assert msg.tid in msg.body and msg.severity is Severity.CRITICAL


def test_split_fix_for_log_alerts_and_context_notes():
    line = "trainer: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    p = match_line(line, default_patterns())
    assert p is not None
    evidence, fix = split_fix(log_alert(p, line, T0, 1).message)
    assert "CUDA out of memory" in evidence and fix and fix in p.advice
    evidence, fix = split_fix(
        "No new step. If stuck, resume. (W&B: running, heartbeat 5 s ago; shown for context only.)"
    )
    assert fix == "If stuck, resume." and "W&B" in evidence


def test_resolved_message_says_when_it_cleared():
    th = Thread("#abc123", "p1", "disk", "Disk almost full", "warning", T0, "m", step=3, resolved=T0 + 600)
    msg = compose("resolved", th, T0 + 720)
    assert msg.title == "[RESOLVED] p1: Disk almost full" and "10 min after it opened" in msg.body


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "tid",
                "pod",
                "rule",
                "title",
                "severity",
                "opened",
                "message",
                "step",
                "resolved",
                "notified",
                "messages",
                "flaps",
                "x",
            ]
        ),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(),
            st.text(max_size=8),
            st.lists(st.integers(), max_size=2),
        ),
    )
)
def test_a_garbled_thread_in_the_state_file_is_skipped_or_sane(data):
    th = Thread.from_json(data)
    if th is not None:
        Severity(th.severity)
        assert isinstance(th.opened, (int, float)) and isinstance(th.pod, str)
        compose("opened", th, T0)
        compose("resolved", th, T0)
