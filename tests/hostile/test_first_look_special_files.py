"""A run dir on this machine is looked at in the app's own event loop at connect (the tail script's function,
run in-process). A FIFO named like a log blocked that look's open() for good (the whole app with it), and a
metrics file linked to /dev/zero was read without end. Now the look reads regular files only, at most its
128 KB tail of each, and the run's real logs are still read."""

from __future__ import annotations

import os
import threading

from services.pod.agent.tails import look


def test_a_fifo_or_an_endless_file_in_the_run_dir_does_not_hold_the_look(tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "trainer.log").write_text("Step 1 | Loss 0.5\nStep 2 | Loss 0.4\n")
    os.mkfifo(run / "logs" / "orchestrator.log")
    os.symlink("/dev/zero", run / "metrics.jsonl")
    os.symlink("/dev/zero", run / "logs" / "zero.log")
    result: dict = {}
    reader = threading.Thread(target=lambda: result.update(look(str(run))), daemon=True)
    reader.start()
    reader.join(timeout=10)
    # (a held thread is left blocked in open(), not freed: it would read /dev/zero next, without end)
    assert not reader.is_alive(), "the first look was held by a special file in the run dir"
    assert [log["stem"] for log in result["logs"]] == ["trainer"]
    assert result["logs"][0]["lines"] == ["Step 1 | Loss 0.5", "Step 2 | Loss 0.4"]
    assert "metrics.jsonl" not in result
