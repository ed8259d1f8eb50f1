"""The Rollouts reader: prime-rl's ``rollouts/step_N/{train,eval}/{all,effective}/traces.jsonl`` read on the pod
(services/pod/agent/rollouts.py) through the service (services/monitor/rollouts.py), on this machine, over a
real sshd through the guard, and over an SSH endpoint without SFTP. Lists carry numbers and names, never the
episodes' text; one episode's text comes bounded, each cut marked; a half-written last line is skipped; a
line too long to parse is named, never loaded; outside text is plain and secrets are masked."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from services.demo.trainer import trace_record
from services.errors import PrimeTrainError
from services.models import Pod, PodKind
from services.monitor.rollouts import (
    EpisodeView,
    Filters,
    RolloutReader,
    RolloutsError,
    export,
    mask_secrets,
)
from services.pod.local import LocalConnection
from services.pod.ssh import SSHConnection

SECRET_PROMPT = "the private prompt of episode"


def record(step: int, i: int, **changes) -> dict:
    rec = trace_record(step, i, 1.0 + i % 3, 2.0, 1.78e9, random.Random(f"{step}:{i}"))
    rec["task"]["data"]["prompt"] = f"{SECRET_PROMPT} {i}"
    rec.update(changes)
    return rec


def write_step(
    run: Path, step: int, recs: list[dict], kind: str = "train", subset: str = "all", tail: bytes = b""
) -> Path:
    d = run / "rollouts" / f"step_{step}" / kind / subset
    d.mkdir(parents=True, exist_ok=True)
    path = d / "traces.jsonl"
    with path.open("wb") as f:
        for r in recs:
            f.write(json.dumps(r, separators=(",", ":")).encode() + b"\n")
        f.write(tail)
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    write_step(run, 1, [record(1, i) for i in range(6)])
    # the newest step: 12 episodes and one still being written (no newline yet)
    write_step(run, 2, [record(2, i) for i in range(12)], tail=json.dumps(record(2, 12)).encode()[:300])
    write_step(run, 2, [record(2, 100 + i) for i in range(3)], kind="eval")
    return run


def local_pod() -> Pod:
    return Pod(name="here", kind=PodKind.LOCAL)


async def test_a_list_has_the_newest_steps_episodes_and_skips_the_line_being_written(run):
    async with LocalConnection(local_pod()) as conn:
        listing = await RolloutReader(conn, str(run)).list_step()
        assert listing.step == 2 and listing.kind == "train" and listing.subset == "all"
        assert [e.id for e in listing.episodes] == [f"e2-{i}" for i in range(12)]
        assert listing.partial and listing.total == 12 and listing.garbled == 0
        assert listing.steps == (1, 2)
        e = listing.episodes[2]  # every third episode is the tool-using env
        assert e.env == "wiki-search" and e.tool_calls >= 1 and e.tools.get("search") == e.tool_calls
        assert e.reward is not None and set(e.rewards) <= {"correct", "tool_use"} and e.turns >= 2
        assert e.tool_s == pytest.approx(1.0 + 2 % 3, abs=1e-3) and e.tokens_in > 0
        older = await RolloutReader(conn, str(run)).list_step(Filters(step=1))
        assert [e.id for e in older.episodes] == [f"e1-{i}" for i in range(6)] and not older.partial
        evals = await RolloutReader(conn, str(run)).list_step(Filters(kind="eval"))
        assert [e.id for e in evals.episodes] == ["e2-100", "e2-101", "e2-102"] and evals.kind == "eval"
        newest = await RolloutReader(conn, str(run)).list_step(Filters(limit=3))
        assert [e.id for e in newest.episodes] == ["e2-9", "e2-10", "e2-11"] and newest.matched == 12


async def test_filters_errors_truncated_env(tmp_path):
    run = tmp_path / "run"
    broken = record(3, 1)
    broken["ok"], broken["errors"] = False, [{"type": "ToolError", "message": "search timed out"}]
    cut = record(3, 2)
    cut["traces"][0]["stop_condition"] = "max_turns"
    write_step(run, 3, [record(3, 0), broken, cut, record(3, 3)])
    async with LocalConnection(local_pod()) as conn:
        r = RolloutReader(conn, str(run))
        errs = await r.list_step(Filters(errors=True))
        assert [e.id for e in errs.episodes] == ["e3-1"] and errs.episodes[0].error == "ToolError: search timed out"
        assert [e.id for e in (await r.list_step(Filters(truncated=True))).episodes] == ["e3-2"]
        assert [e.id for e in (await r.list_step(Filters(env="wiki-search"))).episodes] == ["e3-2"]
        with pytest.raises(RolloutsError, match="no train episodes of step 9"):
            await r.list_step(Filters(step=9))


async def test_the_list_never_carries_the_episodes_text(run):
    async with LocalConnection(local_pod()) as conn:
        lines = await RolloutReader(conn, str(run)).call("list", [])
    sent = json.dumps(lines)
    assert SECRET_PROMPT not in sent and "Reverse the text" not in sent and "search tool" not in sent


async def test_a_search_runs_on_the_pod_and_sends_summaries_with_a_snippet(run):
    async with LocalConnection(local_pod()) as conn:
        r = RolloutReader(conn, str(run))
        found = await r.list_step(Filters(grep=r"private prompt of episode (3|7)\b"))
        assert [e.id for e in found.episodes] == ["e2-3", "e2-7"]
        assert found.episodes[0].matches >= 1 and "private prompt of episode 3" in (found.episodes[0].snippet or "")
        assert len(found.episodes[0].snippet or "") < 200
        none = await r.list_step(Filters(grep="PRIVATE PROMPT OF", ignore_case=False))
        assert none.episodes == () and none.total == 12
        assert len((await r.list_step(Filters(grep="PRIVATE PROMPT OF", ignore_case=True))).episodes) == 12
        with pytest.raises(RolloutsError, match="not a regular expression"):
            await r.list_step(Filters(grep="(unclosed"))


async def test_an_episode_comes_bounded_and_every_cut_is_marked(tmp_path):
    run = tmp_path / "run"
    big = record(4, 0)
    big["traces"][0]["nodes"][1]["message"]["content"] = "x" * 50_000
    write_step(run, 4, [record(4, 1), big])
    async with LocalConnection(local_pod()) as conn:
        r = RolloutReader(conn, str(run))
        view = await r.episode("e4-0", max_text=1000)
        user = view.traces[0].turns[1]
        assert user.role == "user" and user.content.startswith("x" * 1000)
        assert user.content.endswith("[… cut: 49000 more characters]") and view.cuts >= 1
        assert view.traces[0].turns[0].role == "system" and view.traces[0].rewards
        assert view.summary.id == "e4-0" and view.summary.offset > 0
        whole = await r.episode("e4-1")  # found by scanning; at its offset directly
        assert whole.cuts == 0 and whole.summary.offset == 0
        assert (await r.episode("e4-0", offset=view.summary.offset)).summary.id == "e4-0"
        assert (await r.episode("e4-0", offset=3)).summary.id == "e4-0"  # a stale offset: scanned for
        tiny = await r.episode("e4-0", max_text=100_000, max_bytes=2000)  # the whole answer's bound
        assert sum(len(t.content) for t in tiny.traces[0].turns) < 2000 + 200
        with pytest.raises(RolloutsError, match="no episode nope in step 4"):
            await r.episode("nope")


async def test_garbled_and_oversized_lines_are_named_not_loaded(tmp_path, monkeypatch):
    from services.pod.agent import rollouts as agent

    run = tmp_path / "run"
    huge = record(5, 1)
    huge["traces"][0]["nodes"][1]["message"]["content"] = "y" * 4096
    path = write_step(run, 5, [record(5, 0), huge])
    with path.open("ab") as f:
        f.write(b"{not json\n")
    monkeypatch.setattr(agent, "MAX_LINE", 3000)  # the reader in this process: a small bound to cross
    monkeypatch.setattr(agent.sys, "stdout", out := __import__("io").StringIO())
    assert agent.main(["list", str(run)]) == 0
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    eps = [x["ep"] for x in lines if "ep" in x]
    assert [e["id"] for e in eps] == ["e5-0", "e5-1"]
    assert eps[1]["too_large"] and eps[1]["env"] == "reverse-text" and eps[1]["bytes"] > 4096
    assert lines[-1]["done"]["garbled"] == 1 and not lines[-1]["done"]["partial"]
    out.truncate(0)
    out.seek(0)
    assert agent.main(["episode", str(run), "--id", "e5-1"]) == 2
    assert "more than this viewer reads" in json.loads(out.getvalue())["error"]


async def test_outside_text_is_plain_and_secrets_are_masked(tmp_path):
    run = tmp_path / "run"
    rec = record(6, 0)
    msg = rec["traces"][0]["nodes"][1]["message"]
    msg["content"] = "\x1b]52;c;ZWNobyBwd25lZA==\x07clear\x1b[2J [bold]not markup[/bold] key sk-proj-" + "A" * 30
    rec["env"]["name"] = "env\x1b[31m-red"
    write_step(run, 6, [rec])
    async with LocalConnection(local_pod()) as conn:
        r = RolloutReader(conn, str(run))
        view = await r.episode("e6-0")
        listing = await r.list_step()
    text = view.traces[0].turns[1].content
    assert "\x1b" not in text and "\x07" not in text and "[bold]not markup[/bold]" in text
    assert "A" * 30 not in text and "sk-p…[secret" in text
    assert listing.episodes[0].env == "env-red" and view.summary.env == "env-red"
    assert "hf_" + "a" * 34 not in mask_secrets("token hf_" + "a" * 34)
    assert mask_secrets("password: hunter2hunter2") == "password: ***"


async def test_export_writes_jsonl_and_markdown_only_where_asked(run, tmp_path):
    async with LocalConnection(local_pod()) as conn:
        r = RolloutReader(conn, str(run))
        views = await r.dump(step=1)
        one = await r.episode("e2-2")
    assert [v.summary.id for v in views] == [f"e1-{i}" for i in range(6)]
    path, n = export(views, tmp_path / "out" / "step1.jsonl")
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert n == 6 and [x["id"] for x in rows] == [f"e1-{i}" for i in range(6)]
    assert EpisodeView.from_json(rows[0]).summary.id == "e1-0"
    md, _ = export([one], tmp_path / "e2-2.md")
    text = md.read_text()
    assert text.startswith("# Episodes") and "## Episode e2-2" in text and "tool call `search`" in text


async def test_over_sshd_the_reader_runs_through_the_guard(pod, run, tmp_path):
    async with SSHConnection(pod) as conn:
        r = RolloutReader(conn, str(run))
        listing = await r.list_step(Filters(limit=4))
        view = await r.episode(listing.episodes[-1].id, offset=listing.episodes[-1].offset)
    assert [e.id for e in listing.episodes] == ["e2-8", "e2-9", "e2-10", "e2-11"] and listing.partial
    assert view.summary.id == "e2-11" and view.traces[0].turns
    dirs = [p for p in (tmp_path / "podstate").iterdir() if p.name.startswith("rollouts-")]
    assert len(dirs) == 1 and sorted(p.name for p in dirs[0].iterdir()) == ["common.py", "rollouts.py"]
    # a file changed on the pod is not run: the guard refuses it, the reader uploads it again and runs that
    (dirs[0] / "rollouts.py").write_text('print(\'{"error": "planted"}\')\n')
    async with SSHConnection(pod) as conn:
        again = await RolloutReader(conn, str(run)).list_step(Filters(limit=1))
    assert [e.id for e in again.episodes] == ["e2-11"]
    assert "planted" not in (dirs[0] / "rollouts.py").read_text()


async def test_over_an_exec_only_endpoint_without_sftp(provider_sshd, provider_home, run, tmp_path):
    server = provider_sshd("no-sftp")
    provider_home(server)
    async with SSHConnection(server.pod(probe_dir=str(tmp_path / "podstate"))) as conn:
        listing = await RolloutReader(conn, str(run)).list_step(Filters(step=1))
    assert len(listing.episodes) == 6


async def test_a_run_without_episodes_says_so_in_one_line(tmp_path):
    async with LocalConnection(local_pod()) as conn:
        with pytest.raises(PrimeTrainError) as info:
            await RolloutReader(conn, str(tmp_path / "nothing")).list_step()
    assert str(info.value) == f"no train episodes under {tmp_path / 'nothing' / 'rollouts'}"


# ------------------------------------------------------------------ speed: a kept reader, kept summaries, lean parse
# Opening the pane on 256 episodes of 20 KB took 1.3 s (tests/benchmarks/rollouts_list.py): every request was
# its own SSH exec, interpreter start and guard check, and every record was parsed whole, token ids and all.


class CountingSSH(SSHConnection):
    """The real connection, counting the commands it starts on the pod."""

    execs = 0

    async def run(self, command, timeout=30.0, input=None):
        self.execs += 1
        return await super().run(command, timeout, input)

    async def start(self, command):
        self.execs += 1
        return await super().start(command)


async def test_successive_requests_are_answered_by_one_kept_reader_over_sshd(pod, run):
    async with CountingSSH(pod) as conn:
        r = RolloutReader(conn, str(run))
        first = await r.list_step(Filters(limit=4))  # starts the reader (and uploads it: the guard refused)
        after_first = conn.execs
        again = await r.list_step(Filters(limit=4))
        older = await RolloutReader(conn, str(run)).list_step(Filters(step=1))
        view = await r.episode(first.episodes[-1].id, offset=first.episodes[-1].offset)
        evals = await r.list_step(Filters(kind="eval"))
        assert conn.execs == after_first, "a request started a command of its own"
        await r.stop()
    assert again == first and len(older.episodes) == 6 and view.summary.id == "e2-11"
    assert [e.id for e in evals.episodes] == ["e2-100", "e2-101", "e2-102"] and evals.kind == "eval"


def append(path: Path, recs: list[dict], tail: bytes = b"") -> None:
    with path.open("ab") as f:
        for r in recs:
            f.write(json.dumps(r, separators=(",", ":")).encode() + b"\n")
        f.write(tail)


async def test_the_kept_reader_reads_on_where_a_file_grew_and_again_where_it_was_replaced(pod, tmp_path):
    run = tmp_path / "run"
    path = write_step(run, 1, [record(1, i) for i in range(3)], tail=b'{"id":"e1-3","env')
    async with CountingSSH(pod) as conn:
        r = RolloutReader(conn, str(run))
        try:
            one = await r.list_step()
            assert [e.id for e in one.episodes] == ["e1-0", "e1-1", "e1-2"] and one.partial
            kept = conn.execs
            # the half-written line completed, two more episodes and a new half line
            with path.open("r+b") as f:
                f.truncate(path.stat().st_size - len(b'{"id":"e1-3","env'))
            append(path, [record(1, 3), record(1, 4)], tail=b'{"id":"e1-5"')
            two = await r.list_step()
            assert [e.id for e in two.episodes] == [f"e1-{i}" for i in range(5)] and two.partial
            assert two.total == 5
            # rewritten in place, shorter (a run restarted over its step): read from the start
            write_step(run, 1, [record(1, 7)])
            three = await r.list_step()
            assert [e.id for e in three.episodes] == ["e1-7"] and not three.partial and three.total == 1
            # replaced by a new file of the same size: a new inode, read again
            new = path.with_name("new.jsonl")
            new.write_bytes(path.read_bytes().replace(b'"e1-7"', b'"e1-8"'))
            new.replace(path)
            four = await r.list_step()
            assert [e.id for e in four.episodes] == ["e1-8"] and conn.execs == kept
            # the reader ended on the pod (killed, idle): the next request starts another, nothing lost
            import psutil

            for p in psutil.process_iter(["cmdline"]):
                cmd = p.info["cmdline"] or []
                if "serve" in cmd and any(str(tmp_path / "podstate") in c for c in cmd):
                    p.kill()
            five = await r.list_step()
            assert [e.id for e in five.episodes] == ["e1-8"] and conn.execs == kept + 1
        finally:
            await r.stop()


def test_a_summary_from_the_lean_parse_is_the_summary_of_the_whole_record():
    from services.pod.agent import rollouts as agent

    rng = random.Random(3)
    recs = [record(1, i) for i in range(12)]
    for rec in recs:  # the bulk of a real record: token ids, logprobs and masks of each turn
        for node in rec["traces"][0]["nodes"]:
            node["token_ids"] = [rng.randrange(150000) for _ in range(800)]
            node["logprobs"] = [round(-rng.random(), 4) for _ in range(800)]
            node["mask"] = [True] * 800
    # text that looks like such an array, inside strings, and arrays that are not only numbers
    recs[0]["traces"][0]["nodes"][1]["message"]["content"] = 'the model wrote "token_ids":[' + "1," * 80 + "2]"
    recs[1]["errors"] = [{"type": "E", "message": '\\"ids\\":[' + "3," * 50 + "4]"}]
    recs[2]["traces"][0]["metrics"] = {"mixed": [1] * 40 + ["x]"] + [2] * 40}
    for rec in recs:
        raw = json.dumps(rec, separators=(",", ":")).encode()
        lean = agent.lean(raw)
        assert len(lean) * 4 < len(raw)
        args = (1, "train", "all", 0, len(raw))
        assert agent.summary(json.loads(lean), *args) == agent.summary(json.loads(raw), *args)
    assert (
        '"token_ids":[' + "1," * 80
        in json.loads(agent.lean(json.dumps(recs[0]).encode()))["traces"][0]["nodes"][1]["message"]["content"]
    )
