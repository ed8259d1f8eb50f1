"""The probe's run-dir side (standard library only): the logs, metrics.jsonl and training.csv tailed
since the last sample, the per-episode timings of the newest traces.jsonl files, the checkpoints (each
step once, both halves) and what the resolved configs say.

Uploaded beside ``probe.py`` (one directory named by the hash of every file uploaded together) and
imported by it; its sample fields are documented in probe.py's docstring.
"""

from __future__ import annotations

import glob
import json
import math
import os
import sys
import time

if __package__:  # imported from the repo (services.pod.agent.rundir)
    from .common import checkpoint_complete, ckpt_roots, has_orchestrator, step_dirs
    from .traces import (
        TRACE_LAG_BYTES,
        TRACE_READ_BYTES,
        TRACE_RECORDS_PER_SAMPLE,
        TraceTail,
        _trace_paths,
    )
else:  # beside probe.py on the pod: common.py too (this dir is sys.path[0] of the probe)
    if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # loaded by path, not run
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    from common import checkpoint_complete, ckpt_roots, has_orchestrator, step_dirs
    from traces import (
        TRACE_LAG_BYTES,
        TRACE_READ_BYTES,
        TRACE_RECORDS_PER_SAMPLE,
        TraceTail,
        _trace_paths,
    )

LOG_LINES_PER_TICK = 200
LOG_BYTES_PER_FILE = 256 * 1024  # read from one file per sample; older new bytes are skipped (counted as cut)
METRICS_BACKFILL_BYTES = 64 * 1024
# What ONE sample carries, whatever the files do (a log growing by MBs of non-UTF-8 bytes once made
# samples of several MiB, past the SSH window: the monitor went blind). Sizes are of the JSON text.
LOG_BYTES_PER_SAMPLE = 256 * 1024  # all log lines together (the newest kept)
LOG_LINE_BYTES = 4096  # one log line: its first 4 KiB are carried, the rest is counted as cut
METRICS_LINE_BYTES = 64 * 1024  # a longer metrics.jsonl / training.csv line is dropped whole (a cut JSON is no JSON)
METRICS_BYTES_PER_SAMPLE = 256 * 1024  # metrics.jsonl lines together
CSV_BYTES_PER_SAMPLE = 64 * 1024  # training.csv rows together
# the sample's "cut" counters, per kind of file: (bytes, lines)
CUT_KEYS = {
    "log": ("log_bytes", "lines"),
    "metrics": ("metrics_bytes", "metrics_lines"),
    "traces": ("trace_bytes", "trace_records"),
}
CUT_FIELDS = ("log_bytes", "lines", "metrics_bytes", "metrics_lines", "trace_bytes", "trace_records")
MAX_SAMPLE_BYTES = 1024 * 1024  # one sample line at most (the client skips lines over 8 MiB; SSH windows are 2 MiB)


def _jsize(text):
    """Bytes ``text`` takes in the probe's JSON line (UTF-8, control characters escaped)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "backslashreplace")) - 1


def _short(e):
    return ("%s: %s" % (type(e).__name__, e))[:160]


def _try(errors, label, fn, quiet=()):
    """fn() or None; the failure is appended to errors unless its type name is in `quiet`."""
    try:
        return fn()
    except Exception as e:
        if type(e).__name__ not in quiet:
            errors.append("%s: %s" % (label, _short(e)))
        return None


# ----------------------------------------------------------------------------------------- run dir
def _line_start(path, off):
    """Whether byte ``off`` of the file starts a line."""
    with open(path, "rb") as f:
        f.seek(off - 1)
        return f.read(1) in (b"\n", b"")


def _read_json(path):
    with open(path) as f:
        return json.load(f)


def _csv_header(path):
    """The column names of a training.csv (its first line), or None when it has no header."""
    with open(path, "rb") as f:
        first = f.readline(4096).decode("utf-8", "replace").strip()
    names = [c.strip() for c in first.split(",")]
    return names if names and "step" in names else None


def csv_row(line, header):
    """One training.csv line -> a metrics record; None for the header and blank lines."""
    if not line:
        return None
    parts = [c.strip() for c in line.split(",")]
    names = header or ["step", "loss", "lr", "toks_per_s"]
    if header is not None and parts == header:
        return None
    if "step" not in names or not 2 <= len(parts) <= len(names):  # trailing fields may be left out
        return {"source": "training.csv", "raw": line[:300]}
    row: dict[str, object] = {"source": "training.csv"}
    for name, text in zip(names, parts):
        try:
            v = float(text)
            row[name] = int(v) if name == "step" and v == int(v) else (v if math.isfinite(v) else None)
        except ValueError:
            row[name] = text[:100]
    if not isinstance(row.get("step"), int):
        return None if parts[names.index("step")] == "step" else {"source": "training.csv", "raw": line[:300]}
    return row


# ----------------------------------------------------------------------------------------- the line
def encode(obj):
    """One JSON line as UTF-8 bytes: text as itself (a non-UTF-8 log byte, decoded as U+FFFD, takes 3
    bytes, not the 6 of an ASCII escape); a lone surrogate (an odd file name) as its JSON escape."""
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")


def fit(sample, line, max_errors):
    """``sample``'s line, its log and metrics dropped (and counted as cut) when it is over MAX_SAMPLE_BYTES
    even so (the parts are bounded one by one: this is the last guard, not the rule)."""
    if len(line) <= MAX_SAMPLE_BYTES:
        return line
    cut = sample.setdefault("cut", {})
    for key, nb, nl in (
        ("log", "log_bytes", "lines"),
        ("metrics", "metrics_bytes", "metrics_lines"),
        ("traces", "trace_bytes", "trace_records"),
    ):
        if key not in sample:
            continue
        lines, sample[key] = sample.get(key) or [], []
        cut[nb] = cut.get(nb, 0) + sum(len(encode(x)) for x in lines)
        cut[nl] = cut.get(nl, 0) + len(lines)
    sample["errors"] = (sample.get("errors") or [])[: max_errors - 1] + [
        "sample: %d bytes, over %d: its log, metrics and trace lines were left out" % (len(line), MAX_SAMPLE_BYTES)
    ]
    return encode(sample)


class RunDir:
    def __init__(self, run_dir, ckpt_scan, log_from=None):
        self.run_dir, self.ckpt_scan = run_dir, ckpt_scan
        self.files = {}  # realpath -> {"ino", "off", "buf", "over", "skip", "end"}
        self.first_scan = True
        # realpath -> (ino, offset): where the app's last look or sample left each log (a line's start); a log
        # present at start that is still that file goes on from there, so a restart loses none of its lines
        self.log_from = log_from or {}
        self.reported = {}  # realpath -> (ino, end) last sent in "logpos"
        self.ckpts, self.ckpt_at = [], None
        self.complete = {}  # path -> entry of a complete checkpoint (not rescanned)
        self.metrics_file, self.metrics_first = {}, True  # metrics.jsonl tail state (like self.files)
        self.info, self.info_at = {}, None  # from <run>/configs/*.json (run_info)
        self.csv_file, self.csv_first, self.csv_header = {}, True, None  # training.csv tail state
        self.trace_files, self.traces_first = {}, True  # path -> TraceTail
        self.cut = dict.fromkeys(CUT_FIELDS, 0)  # what the current sample leaves out (counted, never silent)
        self.small = {}  # path -> ((mtime_ns, size), parsed): the run's .ptt records, re-read when they change
        self.sid = None  # the session of the run the app launched (its leader's), once known

    def _log_paths(self):
        found: dict[str, str] = {}
        for pat in (("logs", "*.log"), ("logs", "latest", "*.log")):
            for p in sorted(glob.glob(os.path.join(self.run_dir, *pat))):
                found.setdefault(os.path.realpath(p), p)
        return found

    def take_cut(self):
        """What was cut since the last call (the sample's "cut" field): {"log_bytes", "lines",
        "metrics_bytes", "metrics_lines", "trace_bytes", "trace_records"}: bytes of the run's logs
        (metrics.jsonl and training.csv; traces.jsonl) not carried -- skipped unread, cut off a long
        line or dropped with a line -- and lines shortened or dropped (trace_records: episodes whose
        start was skipped, and per-trace records over a sample's share)."""
        cut, self.cut = self.cut, dict.fromkeys(CUT_FIELDS, 0)
        return cut

    def _cut(self, kind, nbytes, lines=0):
        nb, nl = CUT_KEYS[kind]
        self.cut[nb] += max(0, nbytes)
        self.cut[nl] += lines

    def _read_new(self, rp, errors, files=None, first_scan=None, backfill=0, kind="log"):
        """Complete new lines of one file (bytes), updating its offset and the line in progress. At most
        LOG_BYTES_PER_FILE new bytes are read (the newest); a log line keeps its first LOG_LINE_BYTES, a
        metrics line longer than METRICS_LINE_BYTES is dropped; what is left out is counted (take_cut).
        ``backfill``: a file present at start is read from this many bytes before its end."""
        files = self.files if files is None else files
        first_scan = self.first_scan if first_scan is None else first_scan
        st = os.stat(rp)
        ent = files.get(rp)
        if ent is None:  # files present at start: from their end; files appearing later: from the start
            off = max(0, st.st_size - backfill) if first_scan else 0
            known = self.log_from.get(rp) if kind == "log" and first_scan else None
            if known is not None and known[0] == st.st_ino and 0 <= known[1] <= st.st_size:
                off = known[1]  # the app has everything before it
            # skip: the line in progress lost its start (dropped when it ends; "backfill": not counted)
            skip = "backfill" if 0 < off < st.st_size and not _line_start(rp, off) else False
            ent = files[rp] = {
                "ino": st.st_ino,
                "off": off,
                "buf": b"",
                "over": 0,
                "skip": skip,
                "end": None if skip else off,  # where the next whole line starts (None: not known yet)
            }
        elif ent["ino"] != st.st_ino or st.st_size < ent["off"]:  # rotated or truncated
            ent.update(ino=st.st_ino, off=0, buf=b"", over=0, skip=False, end=0)
        if st.st_size == ent["off"]:
            return []
        start = ent["off"]
        if st.st_size - start > LOG_BYTES_PER_FILE:  # the newest bytes only; the line in progress is lost
            new = st.st_size - LOG_BYTES_PER_FILE
            pending = 0 if ent["skip"] == "backfill" else len(ent["buf"]) + ent["over"]
            self._cut(kind, new - start + pending, 1 if pending or ent["skip"] is True else 0)
            ent.update(buf=b"", over=0, skip=not _line_start(rp, new))
            start = new
            errors.append("log: skipped part of %s" % os.path.basename(rp))
        with open(rp, "rb") as f:
            f.seek(start)
            data = f.read(st.st_size - start)
        ent["off"] = start + len(data)
        last_nl = data.rfind(b"\n")
        if last_nl >= 0:
            ent["end"] = start + last_nl + 1
        limit = LOG_LINE_BYTES if kind == "log" else METRICS_LINE_BYTES
        buf, over, skip, out = ent["buf"], ent["over"], ent["skip"], []
        pieces = data.split(b"\n")
        for i, piece in enumerate(pieces):
            room = max(0, limit - len(buf))
            buf += piece[:room]
            over += max(0, len(piece) - room)
            if i == len(pieces) - 1:
                break  # the line goes on in the next read
            if skip or (over and kind != "log"):  # a line whose start was skipped, a metrics line too long
                if skip != "backfill":
                    self._cut(kind, len(buf) + over, 1)
            else:
                if over:
                    self._cut(kind, over, 1)
                out.append(buf)
            buf, over, skip = b"", 0, False
        ent.update(buf=buf, over=over, skip=skip)
        return out

    def _bounded(self, out, errors, kind, what, budget):
        """The newest LOG_LINES_PER_TICK lines of ``out`` that fit ``budget`` bytes together; the
        others are counted as cut."""
        if len(out) > LOG_LINES_PER_TICK:
            errors.append(
                "%s: %d %s skipped"
                % (what, len(out) - LOG_LINES_PER_TICK, "rows" if what == "training.csv" else "lines")
            )
            self._cut(kind, sum(_jsize(x) for x in out[:-LOG_LINES_PER_TICK]), len(out) - LOG_LINES_PER_TICK)
            out = out[-LOG_LINES_PER_TICK:]
        total, keep = 0, 0
        for line in reversed(out):
            total += _jsize(line) + 1
            if total > budget:
                break
            keep += 1
        if keep < len(out):
            dropped = out[: len(out) - keep]
            errors.append("%s: %d lines over the sample's %d KiB skipped" % (what, len(dropped), budget // 1024))
            self._cut(kind, sum(_jsize(x) for x in dropped), len(dropped))
            out = out[len(out) - keep :]
        return out

    def new_lines(self, errors):
        out, paths = [], self._log_paths()
        for rp, p in paths.items():
            stem = os.path.splitext(os.path.basename(p))[0]
            for ln in _try(errors, "log " + os.path.basename(p), lambda: self._read_new(rp, errors)) or []:
                out.append(stem + ": " + ln.decode("utf-8", "replace").rstrip("\r"))
        self.files = dict((rp, e) for rp, e in self.files.items() if rp in paths)
        self.first_scan = False
        return self._bounded(out, errors, "log", "log", LOG_BYTES_PER_SAMPLE)

    def log_positions(self):
        """The sample's "logpos": [[realpath, ino, offset], ...] of each log whose next whole line moved since
        the last sample (offset: the byte after the last whole line read). The app hands them to the next probe
        it starts (--log-from), which goes on from there."""
        out = []
        for rp, ent in self.files.items():
            pos = (ent["ino"], ent.get("end"))
            if pos[1] is not None and self.reported.get(rp) != pos:
                self.reported[rp] = pos
                out.append([rp, pos[0], pos[1]])
        return out

    def new_metrics(self, errors):
        """New lines of <run>/metrics.jsonl (unparsed, bounded like the logs)."""
        path = os.path.join(self.run_dir, "metrics.jsonl")
        first, self.metrics_first = self.metrics_first, False
        if not os.path.isfile(path):
            self.metrics_file = {}
            return []
        rp = os.path.realpath(path)
        lines = (
            _try(
                errors,
                "metrics.jsonl",
                lambda: self._read_new(rp, errors, self.metrics_file, first, METRICS_BACKFILL_BYTES, "metrics"),
            )
            or []
        )
        out = [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines if ln.strip()]
        return self._bounded(out, errors, "metrics", "metrics", METRICS_BYTES_PER_SAMPLE)

    def new_csv_rows(self, errors):
        """New rows of <run>/training.csv as metrics records named by the file's header line."""
        path = os.path.join(self.run_dir, "training.csv")
        first, self.csv_first = self.csv_first, False
        if not os.path.isfile(path):
            self.csv_file, self.csv_header = {}, None
            return []
        rp = os.path.realpath(path)
        ent = self.csv_file.get(rp)
        if ent is None or self.csv_header is None or ent["ino"] != os.stat(rp).st_ino:
            self.csv_header = _try(errors, "training.csv", lambda: _csv_header(rp))
        lines = (
            _try(
                errors,
                "training.csv",
                lambda: self._read_new(rp, errors, self.csv_file, first, METRICS_BACKFILL_BYTES, "metrics"),
            )
            or []
        )
        out = []
        for ln in lines:
            row = csv_row(ln.decode("utf-8", "replace").strip(), self.csv_header)
            if row is not None:
                out.append(json.dumps(row, separators=(",", ":")))
        return self._bounded(out, errors, "metrics", "training.csv", CSV_BYTES_PER_SAMPLE)

    def new_traces(self, errors):
        """Per-trace timings from the traces.jsonl files of the newest traces.TRACE_STEPS rollouts/step_N dirs
        (train/all, else train/effective: the same episodes twice otherwise): new lines since the last
        sample; a file present at start from its last TRACE_READ_BYTES, later ones from their start."""
        first, self.traces_first = self.traces_first, False
        paths = _try(errors, "rollouts", lambda: _trace_paths(os.path.join(self.run_dir, "rollouts"))) or {}
        out: list[dict] = []
        for path, step in sorted(paths.items(), key=lambda kv: kv[1]):
            _try(errors, "traces step_%d" % step, lambda: self._read_traces(path, step, first, out))
        self.trace_files = dict((p, t) for p, t in self.trace_files.items() if p in paths)
        if len(out) > TRACE_RECORDS_PER_SAMPLE:
            self._cut(
                "traces",
                sum(len(json.dumps(r)) for r in out[:-TRACE_RECORDS_PER_SAMPLE]),
                len(out) - TRACE_RECORDS_PER_SAMPLE,
            )
            out = out[-TRACE_RECORDS_PER_SAMPLE:]
        return out

    def _read_traces(self, path, step, first, out):
        st = os.stat(path)
        tail = self.trace_files.get(path)
        if tail is None or tail.ino != st.st_ino or st.st_size < tail.off:  # new, rotated or truncated
            off = max(0, st.st_size - TRACE_READ_BYTES) if first and tail is None else 0
            tail = self.trace_files[path] = TraceTail(step, st.st_ino, off, 0 < off and not _line_start(path, off))
        if st.st_size - tail.off > TRACE_LAG_BYTES:  # the writer outruns us: on from its newest bytes
            new = st.st_size - TRACE_READ_BYTES
            self._cut("traces", new - tail.off, 1 if tail.head or tail.skip else 0)
            tail.jump(new, not _line_start(path, new))
        if st.st_size == tail.off:
            return
        with open(path, "rb") as f:
            f.seek(tail.off)
            data = f.read(min(TRACE_READ_BYTES, st.st_size - tail.off))
        tail.off += len(data)
        skipped = tail.feed(data, out)
        if skipped:
            self._cut("traces", 0, skipped)

    def _ckpt(self, step, tdir, odir, rl):
        """One step, both halves (``odir``: the run dir's step_N when the trainer's lives elsewhere)."""
        sizes, newest = [0, 0], max(os.lstat(d).st_mtime for d in set((tdir, odir or tdir)) if os.path.isdir(d))
        for half, top in ((0, tdir), (1, os.path.join(odir, "orchestrator") if odir else None)):
            for root, _dirs, files in os.walk(top) if top else ():
                orch = half or os.path.relpath(root, tdir).split(os.sep)[0] == "orchestrator"
                if odir and orch and not half:
                    continue  # a stray orchestrator/ beside a separate trainer half: not this run's
                for fn in files:
                    try:
                        st = os.lstat(os.path.join(root, fn))
                    except OSError:
                        continue
                    sizes[bool(orch)] += st.st_size
                    newest = max(newest, st.st_mtime)
        complete = checkpoint_complete(tdir) if odir is None else checkpoint_complete(tdir, odir if rl else None)
        ent = {
            "step": step,
            "path": tdir if os.path.isdir(tdir) else odir,
            "bytes": sum(sizes),
            "trainer_bytes": sizes[0],
            "orch_bytes": sizes[1],
            "mtime": newest,
            "complete": complete,
        }
        if odir is not None:
            ent["orch_path"] = odir
        if complete:
            self.complete[(tdir, odir)] = ent
        return ent

    def checkpoints(self, errors):
        """Each step once, with both halves: the trainer's may live in a separate [ckpt] output_dir."""
        now = time.monotonic()
        if self.ckpt_at is not None and now - self.ckpt_at < self.ckpt_scan:
            return self.ckpts
        self.ckpt_at = now
        troot, oroot = _try(errors, "configs", lambda: ckpt_roots(self.run_dir)) or (
            os.path.join(self.run_dir, "checkpoints"),
            None,
        )
        steps: dict[int, str] = {}
        for base in (troot, oroot) if oroot else (troot,):
            found = _try(errors, "ckpts", lambda: step_dirs(base))
            if found is None:
                return self.ckpts
            steps.update((step, os.path.basename(path)) for step, path in found.items())
        rl = oroot is not None and has_orchestrator(self.run_dir, (oroot,))
        res = []
        for step, name in steps.items():
            key = (os.path.join(troot, name), oroot and os.path.join(oroot, name))
            ent = self.complete.get(key) or _try(errors, "ckpt " + name, lambda: self._ckpt(step, key[0], key[1], rl))
            if ent is not None:
                res.append(ent)
        self.complete = dict((k, e) for k, e in self.complete.items() if os.path.isdir(k[0]))
        self.ckpts = sorted(res, key=lambda c: c["step"])
        return self.ckpts

    def _small_json(self, path):
        """A small JSON file of ours (at most 64 KiB), parsed once per change; None when absent or not JSON."""
        try:
            st = os.stat(path)
        except OSError:
            self.small.pop(path, None)
            return None
        key = (st.st_mtime_ns, st.st_size)
        cached = self.small.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        value = None
        if st.st_size <= 65536:
            try:
                with open(path, "rb") as fh:
                    value = json.loads(fh.read().decode("utf-8", "replace"))
            except (OSError, ValueError, RecursionError):
                value = None
        self.small[path] = (key, value)
        return value

    def run_life(self):
        """The "life" field: what <run>/.ptt/ says about the run the app launched here (None for a run it did
        not launch): its record's state ("running"; "killing"/"killed" once a kill from any machine began or
        ended; "exited"), whether the run's leader process (the shell that runs the command) still lives --
        its pid AND start time, so a reused pid is not it --, the exit code the leader wrote when the command
        ended, and whether it resumed another run. A few stat calls per sample; files re-read on change."""
        ptt = os.path.join(self.run_dir, ".ptt")
        rec = self._small_json(os.path.join(ptt, "run.json"))
        if not isinstance(rec, dict):
            self.sid = None
            return None
        leader = self._small_json(os.path.join(ptt, "leader.json"))
        alive = None
        self.sid = None
        if isinstance(leader, dict) and isinstance(leader.get("pid"), int):
            alive = _same_process(leader["pid"], leader.get("start"))
            self.sid = leader.get("sid") if isinstance(leader.get("sid"), int) else None
        code = None
        try:
            with open(os.path.join(ptt, "exit_code"), "rb") as fh:
                text = fh.read(32).strip()
            if text.lstrip(b"-").isdigit():
                code = int(text)
        except OSError:
            pass

        def num(key):
            v = rec.get(key)
            return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

        return {
            "id": str(rec.get("id") or "")[:80],
            "state": str(rec.get("state") or "")[:20],
            "started": num("started"),
            "ended": num("ended"),
            "alive": alive,
            "exit": code,
            "resumed": bool(rec.get("resume_step") or rec.get("resumed_from")),
        }

    def run_info(self, errors):
        """What the run's resolved configs say (prime-rl writes <run>/configs/*.json at start):
        max_steps (ETA, "$ to go"), the model and the tokens per step (the Offers pane's calibration).
        Read at the checkpoint-scan cadence, not every tick; while none has been found (a run launched after
        the probe started, a plain script), at every tick: three stat calls, and the ETA comes with the next
        sample instead of up to --ckpt-scan seconds later."""
        now = time.monotonic()
        if self.info and self.info_at is not None and now - self.info_at < self.ckpt_scan:
            return self.info
        self.info_at = now
        info: dict = {}
        for name in ("rl.json", "trainer.json", "orchestrator.json"):
            path = os.path.join(self.run_dir, "configs", name)
            if not os.path.isfile(path):
                continue
            cfg = _try(errors, "configs/" + name, lambda: _read_json(path))
            if isinstance(cfg, dict):
                _config_facts(cfg, name, info)
        if info.get("batch_size") and info.get("seq_len"):
            info["tokens_per_step"] = info["batch_size"] * info["seq_len"]
        info.pop("batch_size", None)
        info.pop("seq_len", None)
        self.info = info
        return info


def _same_process(pid, start):
    """The process ``pid`` lives (not a zombie) and, when ``start`` is known, started at that clock tick."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read().decode("utf-8", "replace")
    except (OSError, ValueError, OverflowError):
        return False
    rest = data[data.rfind(")") + 2 :].split()
    if len(rest) < 20 or rest[0] == "Z":
        return False
    return not isinstance(start, int) or not start or int(rest[19]) == start


def _config_facts(cfg, name, info):
    """Fill max_steps, model, batch_size, seq_len from one resolved config (first found wins)."""

    def get(*path):
        node = cfg
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node

    def pos_int(v):
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    trainer = ("trainer",) if name == "rl.json" else ()
    orch = ("orchestrator",) if name == "rl.json" else ()
    found = {
        "max_steps": pos_int(get("max_steps")) or pos_int(get("trainer", "max_steps")),
        "model": get(*trainer, "model", "name") if name != "orchestrator.json" else None,
        "batch_size": pos_int(get(*orch, "batch_size")) if name != "trainer.json" else None,
        "seq_len": pos_int(get(*orch, "seq_len")) or pos_int(get(*trainer, "model", "seq_len")),
    }
    for key, value in found.items():
        if key not in info and value is not None and (key != "model" or isinstance(value, str)):
            info[key] = value
