"""A run's episodes (prime-rl's ``rollouts/step_N/{train,eval}/{all,effective}/traces.jsonl``) read on the pod
by ``services/pod/agent/rollouts.py`` and brought here only when asked: a step's summaries (numbers and
names), one episode's text bounded per request, or a step's episodes for an export.

The reader is uploaded like every pod script (a private directory named by its content hash, run through the
guard: ``services/pod/trusted.py``); on this machine and the simulated pod it runs where it is. Everything that
comes back is outside text: it goes through :func:`clean` (``plain()`` and the secrets masked) before anything
here returns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import sys
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.errors import PrimeTrainError, UnsafeProbeDir
from services.models import PodKind
from services.pod import agent, trusted
from services.pod.connection import Connection, RemoteProcess
from services.text import plain

READER = agent.AGENT_DIR / "rollouts.py"
LIST_LIMIT = 256  # summaries per list request (prime-rl's usual batch)
MAX_TEXT = 16 * 1024  # characters of one text of an episode
MAX_BYTES = 1024 * 1024  # characters of all of one request's texts
TIMEOUT = 30.0


class RolloutsError(PrimeTrainError):
    """Reading a run's episodes failed; the message is for the user."""


# ------------------------------------------------------------------ secrets and outside text
_SECRETS = (
    re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}"),
    re.compile(r"\bpit_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
)
_SECRET_ASSIGN = re.compile(
    r"(?i)((?:api[_-]?key|token|secret|passw(?:or)?d|access[_-]?key)[\"']?\s*[=:]\s*[\"']?)"
    r"([A-Za-z0-9_\-./+]{12,})"
)
_SIGNED = re.compile(r"(X-Amz-(?:Signature|Credential|Security-Token)=)[^&\s]+")
# What every pattern above starts with: a text without any of these is left as it is, one search instead of nine
# (a step's list has thousands of short strings).
_MAYBE_SECRET = re.compile(
    r"hf_|AKIA|ASIA|sk-|pit_|gh[pousr]_|xox[abpr]-|-----BEGIN|X-Amz-"
    r"|(?i:api[_-]?key|token|secret|passw|access[_-]?key)"
)


def mask_secrets(text: str) -> str:
    """Anything that looks like a credential replaced by its first 4 characters and its length (the same
    patterns as the config's secret scan and the logs' masking)."""
    if not text or not _MAYBE_SECRET.search(text):
        return text
    for pattern in _SECRETS:
        text = pattern.sub(lambda m: f"{m.group(0)[:4]}…[secret, {len(m.group(0))} chars]", text)
    text = _SECRET_ASSIGN.sub(lambda m: f"{m.group(1)}***", text)
    return _SIGNED.sub(r"\1***", text)


def clean(obj: Any, *, oneline: bool = False) -> Any:
    """Every string in ``obj`` (dicts, lists) through ``plain()`` and :func:`mask_secrets`."""
    if isinstance(obj, str):
        return mask_secrets(plain(obj, oneline=oneline))
    if isinstance(obj, list):
        return [clean(x, oneline=oneline) for x in obj]
    if isinstance(obj, dict):
        return {clean(k, oneline=True): clean(v, oneline=oneline) for k, v in obj.items()}
    return obj


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _count(v: Any) -> int:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


# ------------------------------------------------------------------ what comes back
@dataclass(frozen=True)
class EpisodeSummary:
    """One episode's line: its numbers and names, never its text (but a search's snippet)."""

    id: str
    step: int
    kind: str
    subset: str
    env: str | None
    reward: float | None
    rewards: dict[str, float]
    turns: int
    tokens_in: int
    tokens_out: int
    truncated: bool
    ok: bool
    error: str | None
    errors: int
    tool_calls: int
    tools: dict[str, int]
    tool_s: float | None
    model_s: float | None
    total_s: float | None
    stop: str | None
    offset: int
    bytes: int
    too_large: bool = False
    matches: int = 0
    snippet: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EpisodeSummary:
        d = clean(d, oneline=True)
        rewards, tools = d.get("rewards"), d.get("tools")
        rewards = rewards if isinstance(rewards, dict) else {}
        tools = tools if isinstance(tools, dict) else {}
        return cls(
            id=str(d.get("id") or ""),
            step=_count(d.get("step")),
            kind=str(d.get("kind") or "train"),
            subset=str(d.get("subset") or "all"),
            env=str(d["env"]) if d.get("env") else None,
            reward=_num(d.get("reward")),
            rewards={str(k): float(v) for k, v in rewards.items() if _num(v) is not None},
            turns=_count(d.get("turns")),
            tokens_in=_count(d.get("tokens_in")),
            tokens_out=_count(d.get("tokens_out")),
            truncated=bool(d.get("truncated")),
            ok=bool(d.get("ok", True)),
            error=str(d["error"]) if d.get("error") else None,
            errors=_count(d.get("errors")),
            tool_calls=_count(d.get("tool_calls")),
            tools={str(k): _count(v) for k, v in tools.items()},
            tool_s=_num(d.get("tool_s")),
            model_s=_num(d.get("model_s")),
            total_s=_num(d.get("total_s")),
            stop=str(d["stop"]) if d.get("stop") else None,
            offset=_count(d.get("offset")),
            bytes=_count(d.get("bytes")),
            too_large=bool(d.get("too_large")),
            matches=_count(d.get("matches")),
            snippet=str(d["snippet"]) if d.get("snippet") else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class StepListing:
    """One step's episodes as a list request found them."""

    step: int
    kind: str
    subset: str
    episodes: tuple[EpisodeSummary, ...]
    total: int  # episodes in the file
    matched: int  # passed the filters (``episodes`` holds the newest ``limit`` of them)
    partial: bool  # the file's last line was still being written (skipped)
    garbled: int  # lines that were not a JSON record
    cut: str | None  # "time": the pod stopped reading at its deadline
    steps: tuple[int, ...]  # the steps that have episodes of this kind (the newest 64)
    path: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "kind": self.kind,
            "subset": self.subset,
            "path": self.path,
            "total": self.total,
            "matched": self.matched,
            "shown": len(self.episodes),
            "partial": self.partial,
            "garbled": self.garbled,
            "cut": self.cut,
            "steps": list(self.steps),
            "episodes": [e.to_json() for e in self.episodes],
        }


@dataclass(frozen=True)
class Filters:
    """What a list request asks the pod for."""

    step: int | None = None
    kind: str = "train"
    subset: str | None = None
    env: str | None = None
    errors: bool = False
    truncated: bool = False
    limit: int = LIST_LIMIT
    grep: str | None = None
    ignore_case: bool = False

    def args(self) -> list[str]:
        out = ["--kind", self.kind, "--limit", str(self.limit)]
        if self.step is not None:
            out += ["--step", str(self.step)]
        if self.subset:
            out += ["--subset", self.subset]
        if self.env:
            out += ["--env", self.env]
        if self.errors:
            out.append("--errors")
        if self.truncated:
            out.append("--truncated")
        if self.grep:
            out += ["--grep", self.grep]
        if self.ignore_case:
            out.append("--ignore-case")
        return out


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    sampled: bool = False
    reasoning: str | None = None
    tool_calls: tuple[dict[str, str], ...] = ()  # {"id", "name", "arguments"}
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class TraceView:
    agent: str
    turns: tuple[Turn, ...]
    rewards: tuple[tuple[str, float | None, float | None], ...]  # (name, score, weight)
    metrics: dict[str, float | None]
    timing: dict[str, float | None]  # tool, model, total seconds
    stop: str | None
    truncated: bool
    errors: tuple[str, ...]
    info: str | None


@dataclass(frozen=True)
class EpisodeView:
    """One episode as the viewer shows it, every text cleaned and cut to the request's bounds."""

    summary: EpisodeSummary
    task: str | None
    errors: tuple[str, ...]
    traces: tuple[TraceView, ...]
    cuts: int  # texts that were cut (each ends with a marker)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the cleaned JSON

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EpisodeView:
        d = clean(d)
        traces = []
        for t in d.get("traces") or []:
            if not isinstance(t, dict):
                continue
            turns = tuple(
                Turn(
                    role=str(u.get("role") or "?"),
                    content=str(u.get("content") or ""),
                    sampled=bool(u.get("sampled")),
                    reasoning=str(u["reasoning"]) if u.get("reasoning") else None,
                    tool_calls=tuple(
                        {
                            "id": str(c.get("id") or ""),
                            "name": str(c.get("name") or "?"),
                            "arguments": str(c.get("arguments") or ""),
                        }
                        for c in u.get("tool_calls") or []
                        if isinstance(c, dict)
                    ),
                    tool_call_id=str(u["tool_call_id"]) if u.get("tool_call_id") else None,
                    name=str(u["name"]) if u.get("name") else None,
                )
                for u in t.get("turns") or []
                if isinstance(u, dict)
            )
            rewards = tuple(
                (str(r.get("name") or "?"), _num(r.get("score")), _num(r.get("weight")))
                for r in t.get("rewards") or []
                if isinstance(r, dict)
            )
            timing, metrics = t.get("timing"), t.get("metrics")
            timing = timing if isinstance(timing, dict) else {}
            metrics = metrics if isinstance(metrics, dict) else {}
            traces.append(
                TraceView(
                    agent=str(t.get("agent") or "agent"),
                    turns=turns,
                    rewards=rewards,
                    metrics={str(k): _num(v) for k, v in metrics.items()},
                    timing={k: _num(timing.get(k)) for k in ("tool", "model", "total")},
                    stop=str(t["stop"]) if t.get("stop") else None,
                    truncated=bool(t.get("truncated")),
                    errors=tuple(str(e) for e in t.get("errors") or []),
                    info=str(t["info"]) if t.get("info") else None,
                )
            )
        return cls(
            summary=EpisodeSummary.from_json(d),
            task=str(d["task"]) if d.get("task") else None,
            errors=tuple(str(e) for e in d.get("error_list") or []),
            traces=tuple(traces),
            cuts=_count(d.get("cuts")),
            raw=d,
        )

    def to_json(self) -> dict[str, Any]:
        return self.raw


# ------------------------------------------------------------------ the reader on the pod
_INSTALLED: weakref.WeakKeyDictionary[Connection, str] = weakref.WeakKeyDictionary()
_SERVERS: weakref.WeakKeyDictionary[Connection, _Server] = weakref.WeakKeyDictionary()
SERVE_START = 20.0  # seconds a starting reader (upload check, interpreter, guard) may take before one-shot runs


class _Server:
    """One ``rollouts.py serve`` on a connection: requests one at a time, each answer framed by its length.
    It ends with the connection (its stdin closes) or after the reader's idle time."""

    def __init__(self) -> None:
        self.proc: RemoteProcess | None = None
        self.lock = asyncio.Lock()
        self.broken = False  # it could not be started here: requests run one by one

    def drop(self) -> None:
        """Forget the process (after a timeout, a cancel or a garbled answer its stream is out of step)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            task = asyncio.ensure_future(_end(proc, 0.0))
            _DROPPING.add(task)
            task.add_done_callback(_DROPPING.discard)


_DROPPING: set[asyncio.Future[None]] = set()


async def _end(proc: RemoteProcess, wait: float) -> None:
    """Its stdin closed (a reader ends there by itself, within ``wait`` s), else killed."""
    with contextlib.suppress(Exception):
        proc.write_eof()
        if wait:
            await asyncio.wait_for(proc.wait(), wait)
            return
    await proc.kill()


async def _exchange(proc: RemoteProcess, request: bytes, timeout: float) -> tuple[int, str] | None:
    """One request and its answer; None when the process answered nothing (it had ended)."""
    await proc.write(request)
    head = await asyncio.wait_for(proc.readline(), timeout)
    try:
        answer = json.loads(head) if head.startswith(b'{"answer":') else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("answer"), int):
        return None
    body = await asyncio.wait_for(proc.stdout.readexactly(answer["answer"]), timeout)
    rc = answer.get("rc")
    return (rc if isinstance(rc, int) else 2), body.decode("utf-8", "replace")


async def stop_reader(conn: Connection, one_by_one: bool = False) -> None:
    """End the reader process kept on ``conn`` (the next request starts a new one); with ``one_by_one`` every
    later request runs on its own instead."""
    server = _SERVERS.setdefault(conn, _Server())
    proc, server.proc = server.proc, None
    server.broken = one_by_one
    if proc is not None:
        await _end(proc, 2.0)


class RolloutReader:
    """``rollouts.py`` on one connected pod: through the guard on an SSH pod (uploaded once per content), as
    it is here for this machine and the simulated pod. On an SSH pod requests go to one reader process kept per
    connection (``rollouts.py serve``); where that cannot start, on this machine and the simulated pod, or with
    ``keep`` false (one request, as the command makes), each request runs on its own."""

    def __init__(self, conn: Connection, run_dir: str, keep: bool = True) -> None:
        self.conn, self.run_dir, self.keep = conn, run_dir, keep
        self.local = conn.pod.kind is not PodKind.SSH

    def _bundle(self) -> trusted.Bundle:
        return trusted.pod_bundle(self.conn.pod, agent.ROLLOUTS_FILES, "rollouts")

    def _command(self, args: list[str]) -> str:
        if self.local:
            return shlex.join([sys.executable, str(READER), *args])
        return shlex.join(self._bundle().run_argv(*args))

    async def _install(self) -> None:
        b = self._bundle()
        if _INSTALLED.get(self.conn) == b.directory:
            return
        try:
            await trusted.install(self.conn, b)
        except UnsafeProbeDir as exc:
            raise RolloutsError(str(exc), hint=exc.hint) from None
        except PrimeTrainError as exc:
            raise RolloutsError(f"cannot upload the episode reader to {self.conn.pod.name}: {exc}") from None
        _INSTALLED[self.conn] = b.directory

    async def _start(self) -> RemoteProcess | None:
        """The serving process, started (the reader uploaded when the guard refuses what is there); None
        where it cannot run (then requests run one by one, which say why when they fail too)."""
        for attempt in (1, 2):
            try:
                # exec: the reader is the process started, so ending it ends the reader, not a shell above it
                proc = await self.conn.start("exec " + self._command(["serve"]))
            except PrimeTrainError:
                return None
            try:
                first = b""
                for _ in range(20):  # the pod's shell start-up files may print lines first
                    first = await asyncio.wait_for(proc.readline(), SERVE_START)
                    if not first or first.startswith(b"{"):
                        break
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, OSError):
                first = b""
            if first.strip() == b'{"serving":1}':
                return proc
            await proc.kill()
            if attempt == 1 and not self.local and trusted.untrusted(first) is not None:
                _INSTALLED.pop(self.conn, None)
                await self._install()
                continue
            return None
        return None

    async def stop(self, one_by_one: bool = False) -> None:
        await stop_reader(self.conn, one_by_one)

    async def _served(self, argv: list[str], timeout: float) -> tuple[int, str] | None:
        """(exit status, output) of one request to the serving reader; None where there is none."""
        server = _SERVERS.get(self.conn)
        if server is None:
            server = _SERVERS[self.conn] = _Server()
        request = json.dumps(argv).encode() + b"\n"
        async with server.lock:
            for _ in (1, 2):  # a second time with a new process when the kept one had ended (idle, killed)
                if server.broken:
                    return None
                if server.proc is None:
                    server.proc = await self._start()
                    if server.proc is None:
                        server.broken = True
                        return None
                try:
                    got = await _exchange(server.proc, request, timeout)
                except (asyncio.TimeoutError, asyncio.CancelledError):  # its stream is out of step now
                    server.drop()
                    raise
                except Exception:  # noqa: BLE001 - the process or its channel ended: a new one, or one by one
                    got = None
                if got is not None:
                    return got
                server.drop()
            return None

    async def call(self, cmd: str, args: list[str], timeout: float = TIMEOUT) -> list[dict[str, Any]]:
        """The reader's JSON lines for ``cmd`` (list, episode, dump). Raises RolloutsError."""
        argv = [cmd, self.run_dir, *args]
        for attempt in (1, 2):
            try:
                # kept on SSH pods only: there each request costs an exec, an interpreter start and the guard's
                # check, and the process ends with the connection; here each request is one local process
                got = await self._served(argv, timeout) if self.keep and not self.local else None
                if got is not None:
                    rc, out, err = got[0], got[1], ""
                else:
                    rc, out, err = await self.conn.run(self._command(argv), timeout)
            except asyncio.TimeoutError:
                raise RolloutsError(
                    f"{self.conn.pod.name} did not answer within {timeout:g} s",
                    hint="the pod may be busy; try a smaller --limit or another step",
                ) from None
            except PrimeTrainError as exc:
                raise RolloutsError(f"cannot read episodes on {self.conn.pod.name}: {exc}") from None
            lines = []
            for line in out.splitlines():
                if line.startswith("{"):
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(obj, dict):
                        lines.append(obj)
            why = next((trusted.untrusted(line) for line in out.splitlines()[:3] if trusted.untrusted(line)), None)
            if why is not None and not self.local:
                if attempt == 1:
                    _INSTALLED.pop(self.conn, None)
                    await self._install()
                    continue
                raise RolloutsError(f"the episode reader on {self.conn.pod.name} could not be verified: {why}")
            errors = [str(o["error"]) for o in lines if "error" in o]
            if errors:
                raise RolloutsError(plain(errors[0], oneline=True))
            if rc != 0 or not lines:
                tail = [ln for ln in (err or out).strip().splitlines() if ln.strip()]
                raise RolloutsError(
                    f"the episode reader failed on {self.conn.pod.name}: "
                    + plain(tail[-1] if tail else f"exit status {rc}", oneline=True)[:200],
                    hint="is python3 installed on the pod?",
                )
            return lines
        raise AssertionError("unreachable")

    async def list_step(self, filters: Filters = Filters(), timeout: float = TIMEOUT) -> StepListing:
        lines = await self.call("list", [*filters.args(), "--timeout", str(max(1.0, timeout - 5))], timeout)
        done = next((o["done"] for o in lines if isinstance(o.get("done"), dict)), None)
        if done is None:
            raise RolloutsError(f"the episode reader on {self.conn.pod.name} stopped before its answer")
        eps = tuple(EpisodeSummary.from_json(o["ep"]) for o in lines if isinstance(o.get("ep"), dict))
        steps = tuple(
            sorted(
                _count(s.get("step"))
                for s in done.get("steps") or []
                if isinstance(s, dict) and isinstance(s.get("kinds"), dict) and filters.kind in s["kinds"]
            )
        )
        return StepListing(
            step=_count(done.get("step")),
            kind=str(done.get("kind") or filters.kind),
            subset=str(done.get("subset") or "all"),
            episodes=eps,
            total=_count(done.get("episodes")),
            matched=_count(done.get("matched")),
            partial=bool(done.get("partial")),
            garbled=_count(done.get("garbled")),
            cut=str(done["cut"]) if done.get("cut") else None,
            steps=steps,
            path=plain(str(done.get("path") or ""), oneline=True),
        )

    async def episode(
        self,
        episode_id: str,
        step: int | None = None,
        kind: str = "train",
        subset: str | None = None,
        offset: int | None = None,
        max_text: int = MAX_TEXT,
        max_bytes: int = MAX_BYTES,
        timeout: float = TIMEOUT,
    ) -> EpisodeView:
        args = ["--id", episode_id, "--kind", kind, "--max-text", str(max_text), "--max-bytes", str(max_bytes)]
        if step is not None:
            args += ["--step", str(step)]
        if subset:
            args += ["--subset", subset]
        if offset is not None:
            args += ["--offset", str(offset)]
        lines = await self.call("episode", args, timeout)
        found = next((o["episode"] for o in lines if isinstance(o.get("episode"), dict)), None)
        if found is None:
            raise RolloutsError(f"the episode reader on {self.conn.pod.name} sent no episode")
        return EpisodeView.from_json(found)

    async def dump(
        self,
        step: int | None = None,
        kind: str = "train",
        subset: str | None = None,
        limit: int = LIST_LIMIT,
        max_text: int = MAX_TEXT,
        max_bytes: int = 8 * MAX_BYTES,
        timeout: float = 120.0,
    ) -> list[EpisodeView]:
        args = ["--kind", kind, "--limit", str(limit), "--max-text", str(max_text), "--max-bytes", str(max_bytes)]
        if step is not None:
            args += ["--step", str(step)]
        if subset:
            args += ["--subset", subset]
        lines = await self.call("dump", args, timeout)
        return [EpisodeView.from_json(o["episode"]) for o in lines if isinstance(o.get("episode"), dict)]


# ------------------------------------------------------------------ export (only when the user asks)
def episode_markdown(v: EpisodeView) -> str:
    s = v.summary
    out = [
        f"## Episode {s.id}",
        "",
        f"- step {s.step} ({s.kind}/{s.subset}), env {s.env or 'N/A'}",
        f"- reward {fmt(s.reward)}"
        + (" (" + ", ".join(f"{k} {fmt(x)}" for k, x in s.rewards.items()) + ")" if s.rewards else ""),
        f"- turns {s.turns}, tokens {s.tokens_in} in / {s.tokens_out} out, tool calls {s.tool_calls}",
        f"- time: tools {fmt(s.tool_s, 's')}, model {fmt(s.model_s, 's')}, total {fmt(s.total_s, 's')}",
        f"- stop {s.stop or 'N/A'}" + (", truncated" if s.truncated else ""),
    ]
    out += [f"- error: {e}" for e in v.errors]
    if v.task:
        out += ["", "### Task", "", "```", v.task, "```"]
    for t in v.traces:
        out += ["", f"### Trace ({t.agent})"]
        for u in t.turns:
            who = u.role + (f" ({u.name})" if u.name else "")
            out += ["", f"**{who}**", "", "```", u.content, "```"]
            if u.reasoning:
                out += ["", "_reasoning_", "", "```", u.reasoning, "```"]
            for c in u.tool_calls:
                out += ["", f"→ tool call `{c['name']}`", "", "```", c["arguments"], "```"]
        out += [f"- error: {e}" for e in t.errors]
    return "\n".join(out) + "\n"


def fmt(v: float | None, unit: str = "") -> str:
    return "N/A" if v is None else f"{v:.3g}{unit}"


def export(views: Iterable[EpisodeView], path: str | Path) -> tuple[Path, int]:
    """Write episodes to ``path``: JSON lines for ``.jsonl``/``.json``, Markdown otherwise. The file is
    written atomically; returns (path, episodes written)."""
    from services.atomic import atomic_write_text

    p = Path(path).expanduser()
    views = list(views)
    if p.suffix.lower() in (".jsonl", ".json"):
        text = "".join(json.dumps(v.to_json(), ensure_ascii=False) + "\n" for v in views)
    else:
        text = "# Episodes\n\n" + "\n".join(episode_markdown(v) for v in views)
    atomic_write_text(p, text)
    return p, len(views)
