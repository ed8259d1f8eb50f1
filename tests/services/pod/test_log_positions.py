"""Where each run log was read up to, carried across a probe's restart: the probe's "logpos" (each log's offset
after its last whole line, sent when it moves), the first look's positions (services/pod/agent/tails.py) and the
next probe's --log-from, which goes on from there when the file is still the same one. Without them a reconnect,
or the moment between the first look and the probe's start, lost every line written meanwhile (an OOM's cause)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from services.models import Pod, PodKind
from services.monitor.worker import MAX_LOG_FILES, MonitorSettings, PodMonitorState
from services.pod.agent import probe as probe_mod
from services.pod.agent.rundir import RunDir
from services.pod.agent.tails import look


def run_with_log(tmp_path: Path, text: str) -> tuple[Path, Path]:
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "trainer.log"
    log.write_text(text)
    return tmp_path, log


def test_positions_are_sent_once_per_move_and_stop_at_the_last_whole_line(tmp_path: Path) -> None:
    run, log = run_with_log(tmp_path, "a\n")
    rd = RunDir(str(run), 10.0)
    assert rd.new_lines([]) == []  # present at start: from its end
    rp = os.path.realpath(log)
    ino = os.stat(log).st_ino
    assert rd.log_positions() == [[rp, ino, 2]]  # every log once, even before it moves
    assert rd.log_positions() == []
    with log.open("a") as f:
        f.write("b\nhalf")
    assert rd.new_lines([]) == ["trainer: b"]
    assert rd.log_positions() == [[rp, ino, 4]]  # not past "half": the next probe reads that line whole
    with log.open("a") as f:
        f.write(" done\n")
    assert rd.new_lines([]) == ["trainer: half done"]
    assert rd.log_positions() == [[rp, ino, 14]]


def test_a_probe_given_positions_goes_on_from_them_when_the_file_is_the_same(tmp_path: Path) -> None:
    run, log = run_with_log(tmp_path, "a\nb\nc\n")
    rp, ino = os.path.realpath(log), os.stat(log).st_ino
    assert RunDir(str(run), 10.0, {rp: (ino, 2)}).new_lines([]) == ["trainer: b", "trainer: c"]
    # another file at that path (rotated), or an offset past its end (truncated): from its end, as without
    assert RunDir(str(run), 10.0, {rp: (ino + 1, 2)}).new_lines([]) == []
    assert RunDir(str(run), 10.0, {rp: (ino, 99)}).new_lines([]) == []
    # an offset inside a line: that line's rest is not shown as a line of its own
    assert RunDir(str(run), 10.0, {rp: (ino, 3)}).new_lines([]) == ["trainer: c"]


def test_the_log_from_argument_keeps_only_well_formed_entries() -> None:
    parsed = probe_mod._log_from('[["/r/logs/a.log", 5, 10], ["x", -1, 2], ["y", true, 2], [1, 2, 3], "z", ["w", 1]]')
    assert parsed == {"/r/logs/a.log": (5, 10)}
    assert probe_mod._log_from("not json") == {}
    assert probe_mod._log_from('{"a": 1}') == {}
    args = probe_mod.parse_args(["--backend", "none", "--log-from", '[["/p", 1, 2]]'])
    assert args.log_from == {"/p": (1, 2)}


def test_the_first_look_stops_at_the_last_whole_line_and_says_where(tmp_path: Path) -> None:
    run, log = run_with_log(tmp_path, "14:00:01 SUCCESS Step 1\nhalf a li")
    found = look(str(run))["logs"]
    assert [(x["stem"], x["lines"]) for x in found] == [("trainer", ["14:00:01 SUCCESS Step 1"])]
    assert (found[0]["path"], found[0]["ino"], found[0]["pos"]) == (
        os.path.realpath(log),
        os.stat(log).st_ino,
        len("14:00:01 SUCCESS Step 1\n"),
    )
    with log.open("a") as f:
        f.write("ne\n")
    rd = RunDir(str(run), 10.0, {found[0]["path"]: (found[0]["ino"], found[0]["pos"])})
    assert rd.new_lines([]) == ["trainer: half a line"]  # the line the look left out, whole


def test_the_app_keeps_well_formed_positions_only_and_a_bounded_number() -> None:
    w = PodMonitorState(Pod(name="p", kind=PodKind.LOCAL, run_dir="/r"), MonitorSettings(), time.monotonic)
    w.note_log_positions([["/r/logs/a.log", 1, 10], ["/r/b", 1.5, 2], ["", 1, 2], ["/r/c", 1, -2], None, ["/r/d"]])
    w.note_log_positions({"not": "a list"})
    w.note_log_positions([["/r/e", True, 3], ["x" * 5000, 1, 2], ["/r/f", 1 << 70, 2]])
    assert w.log_pos == {"/r/logs/a.log": (1, 10)}
    w.note_log_positions([[f"/r/{i}", 1, i] for i in range(3 * MAX_LOG_FILES)])
    assert len(w.log_pos) == MAX_LOG_FILES
    w.note_log_positions([["/r/logs/a.log", 2, 20]])  # a known log still moves when the cap is reached
    assert w.log_pos["/r/logs/a.log"] == (2, 20)
    assert w.log_from_arg()[0] == "--log-from"
    w.new_run()  # another run dir: nothing of the old run's logs
    assert w.log_pos == {} and w.log_from_arg() == []
