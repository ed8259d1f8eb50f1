"""The probe's prime-rl signals (standard library only): the weight-broadcast markers, the roles of the
run's processes from their titles, and the local HTTP endpoints the resolved configs name.

Uploaded beside ``probe.py`` and imported by it. One sample's ``"signals"`` field (with --run-dir)::

    {"broadcast": {"step": N, "stable": <mtime>|null, "ready": <mtime>|null,
                   "handshakes": [[step, seconds], ...]} | null,
     "roles": {"Trainer": 1, "Orchestrator": 1, "Inference": 1, "EnvServer": 2, ...} | null,
     "http": {"at": <epoch s>, "trainer": {"health": bool, "step": int|null, "last_step_ts": float|null}|null,
              "inference": {"health": bool}|null} | null}

- broadcast: the newest ``<run>/broadcasts/step_N`` dir. With NCCL transfer prime-rl's trainer touches
  ``STABLE`` there after its optimizer step and waits for ``NCCL_READY``, which the orchestrator touches
  once it has paused the inference engines; then both sides run the transfer. ``stable``/``ready`` are the
  markers' mtimes (null: absent; a ``NCCL_READY`` older than ``STABLE`` -- left from before a resume
  re-broadcast the step -- is absent); ``handshakes``: STABLE -> NCCL_READY seconds of the newest <= 10
  earlier steps that have both (cached: a finished handshake does not change). Null while there is no
  step dir. The dir list is re-read only when the broadcasts dir's mtime changes.
- roles: live processes per ``PRIME-RL::<Name>`` title (prime-rl's setproctitle: its argv, read from
  /proc/PID/cmdline). A pid's role is cached; pids without one are looked at again every 10 s (a title
  is set a moment after the process starts). For a run the app launched only its own processes count (the
  session of its leader, .ptt/leader.json): another run or a leftover on the same pod is not its. Null when
  /proc cannot be listed.
- http: at most every HTTP_EVERY_S, on a thread of its own (the first look inline, so --once has it):
  the trainer's metrics server (``[trainer.metrics_server]``: /health, and /metrics for trainer_step and
  trainer_last_step_timestamp_seconds) and the inference engine's /health (``backend_port`` behind a
  router, else ``server.port``), on 127.0.0.1 only, at most HTTP_BUDGET_S for all of them and
  HTTP_MAX_BYTES per answer. Ports come only from <run>/configs/{trainer,inference,rl}.json; an endpoint
  bound to another address than all/loopback is left out (null), as is everything when no config names
  one. ``health`` is true for a 2xx answer, false for anything else (refused, timeout, 5xx).
"""

from __future__ import annotations

import json
import os
import threading
import time

PREFIX = b"PRIME-RL::"
HANDSHAKES = 10
ROLE_RESCAN_S = 10.0
HTTP_EVERY_S = 10.0
HTTP_BUDGET_S = 1.0
HTTP_MAX_BYTES = 64 * 1024
MAX_ROLES = 32
LOOPBACK_HOSTS = (None, "", "0.0.0.0", "::", "127.0.0.1", "localhost")
GAUGES = ("trainer_step", "trainer_last_step_timestamp_seconds")


def _step_of(name):
    if not name.startswith("step_"):
        return None
    tail = name[5:]
    return int(tail) if tail.isdigit() else None


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


class Broadcasts:
    """The newest broadcasts/step_N markers and the earlier steps' handshake times."""

    def __init__(self, run_dir):
        self.root = os.path.join(run_dir, "broadcasts")
        self.dir_mtime, self.steps = None, []  # sorted step numbers
        self.done = {}  # step -> handshake seconds (both markers there: fixed)

    def _scan(self):
        mt = _mtime(self.root)
        if mt is None:
            self.dir_mtime, self.steps, self.done = None, [], {}
            return
        if mt != self.dir_mtime:
            self.dir_mtime = mt
            steps = []
            with os.scandir(self.root) as it:
                for ent in it:
                    step = _step_of(ent.name)
                    if step is not None:
                        steps.append(step)
            self.steps = sorted(steps)
            keep = set(self.steps)
            self.done = dict((s, v) for s, v in self.done.items() if s in keep)

    def _markers(self, step):
        d = os.path.join(self.root, "step_%d" % step)
        stable, ready = _mtime(os.path.join(d, "STABLE")), _mtime(os.path.join(d, "NCCL_READY"))
        if stable is not None and ready is not None and ready < stable - 1.0:
            ready = None  # left from before a resume re-broadcast this step
        return stable, ready

    def read(self):
        self._scan()
        if not self.steps:
            return None
        newest = self.steps[-1]
        stable, ready = self._markers(newest)
        hist: list = []
        for step in reversed(self.steps[-3 * HANDSHAKES - 1 : -1]):  # a few gaps allowed, never the whole list
            if len(hist) >= HANDSHAKES:
                break
            if step not in self.done:
                s, r = self._markers(step)
                if s is None or r is None:
                    continue  # a filesystem broadcast (no NCCL_READY ever) or a step being pruned
                self.done[step] = round(max(0.0, r - s), 3)
            hist.append([step, self.done[step]])
        hist.reverse()
        return {"step": newest, "stable": stable, "ready": ready, "handshakes": hist}


NEW_PID_LOOKS = 5  # samples in a row a new untitled pid is looked at again, before the 10-s rescan takes over


class Roles:
    """Live processes per PRIME-RL:: title; with ``sid`` set (the session of the run the app launched, from
    its leader), only that run's processes -- another run or a stale process on the same pod is not its."""

    def __init__(self, proc_root):
        self.proc_root = proc_root
        self.role = {}  # pid -> (role name, session id), or None (looked at, no title)
        self.rescan_at = 0.0
        self.fresh = {}  # pid -> looks so far at a new untitled pid (looked at again on each of the next samples)
        self.sid = None

    def _title(self, pid):
        try:
            with open(os.path.join(self.proc_root, pid, "cmdline"), "rb") as f:
                head = f.read(256)
        except OSError:
            return None
        if not head.startswith(PREFIX):
            return None
        name = head[len(PREFIX) :].split(b"\0", 1)[0].split(b" ", 1)[0]
        if not name:
            return None
        try:
            with open(os.path.join(self.proc_root, pid, "stat"), "rb") as f:
                stat = f.read(1024).decode("utf-8", "replace")
            sid = int(stat[stat.rfind(")") + 2 :].split()[3])
        except (OSError, ValueError, IndexError):
            sid = None
        return name[:40].decode("ascii", "replace"), sid

    def read(self):
        pids = [p for p in os.listdir(self.proc_root) if p.isdigit()]
        now = time.monotonic()
        full = now >= self.rescan_at
        if full:
            self.rescan_at = now + ROLE_RESCAN_S
        role, fresh = {}, {}
        for pid in pids:
            looks = self.fresh.get(pid, 0)
            # a titled pid is read again every sample (a few small reads): a forked child shows its parent's
            # title (the launcher's) until it execs and sets its own
            if pid in self.role and self.role[pid] is None and not (full or looks < NEW_PID_LOOKS):
                role[pid] = self.role[pid]
            else:
                role[pid] = self._title(pid)
                if role[pid] is None and looks < NEW_PID_LOOKS:
                    fresh[pid] = looks + 1  # a new process sets its title a moment after it starts
        self.role, self.fresh = role, fresh
        counts: dict = {}
        for found in role.values():
            if found is None or (self.sid is not None and found[1] != self.sid):
                continue
            name = found[0]
            if name in counts or len(counts) < MAX_ROLES:
                counts[name] = counts.get(name, 0) + 1
        return counts


def _read_json(path):
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _port(v):
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536 else None


def endpoints(run_dir):
    """{"trainer": port, "inference": port} from the resolved configs (each only when named and reachable
    on loopback)."""
    conf = os.path.join(run_dir, "configs")
    rl = _read_json(os.path.join(conf, "rl.json")) or {}
    trainer = _read_json(os.path.join(conf, "trainer.json")) or rl.get("trainer")
    infer = _read_json(os.path.join(conf, "inference.json")) or rl.get("inference")
    found = {}
    ms = trainer.get("metrics_server") if isinstance(trainer, dict) else None
    if isinstance(ms, dict) and ms.get("host", "0.0.0.0") in LOOPBACK_HOSTS and _port(ms.get("port", 8000)):
        found["trainer"] = ms.get("port", 8000)
    server = infer.get("server") if isinstance(infer, dict) else None
    if isinstance(infer, dict) and isinstance(server, dict) and server.get("host") in LOOPBACK_HOSTS:
        port = _port(server.get("port", 8000))
        if infer.get("router") is not None and port:  # the engine sits behind the router
            port = _port(infer.get("backend_port", port + 100))
        if port:
            found["inference"] = port
    return found


def _get(port, path, deadline):
    """(status, body bytes) of GET http://127.0.0.1:port/path, or (None, b"") when it did not answer
    before ``deadline`` (monotonic)."""
    import http.client

    left = deadline - time.monotonic()
    if left <= 0:
        return None, b""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=left)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        resp = conn.getresponse()
        body = resp.read(HTTP_MAX_BYTES)
        return resp.status, body
    except (OSError, http.client.HTTPException, ValueError):
        return None, b""
    finally:
        conn.close()


def parse_gauges(text):
    """The GAUGES' values in a Prometheus text body (unlabelled samples only)."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        parts = line.split()
        if len(parts) >= 2 and parts[0] in GAUGES:
            try:
                v = float(parts[1])
            except ValueError:
                continue
            if v == v and v not in (float("inf"), float("-inf")):
                out[parts[0]] = v
    return out


def check_http(ports):
    deadline = time.monotonic() + HTTP_BUDGET_S
    res: dict = {"at": time.time(), "trainer": None, "inference": None}
    if "inference" in ports:  # first: its death is the most urgent of the two
        status, _ = _get(ports["inference"], "/health", deadline)
        res["inference"] = {"health": status is not None and 200 <= status < 300}
    if "trainer" in ports:
        status, _ = _get(ports["trainer"], "/health", deadline)
        ent: dict = {"health": status is not None and 200 <= status < 300, "step": None, "last_step_ts": None}
        if ent["health"]:
            status, body = _get(ports["trainer"], "/metrics", deadline)
            if status == 200:
                g = parse_gauges(body.decode("utf-8", "replace"))
                step = g.get("trainer_step")
                ent["step"] = int(step) if step is not None else None
                ent["last_step_ts"] = g.get("trainer_last_step_timestamp_seconds")
        res["trainer"] = ent
    return res


class Http:
    """The latest look at the endpoints: the first inline, then one every HTTP_EVERY_S on a thread."""

    def __init__(self, run_dir, every=HTTP_EVERY_S):
        self.run_dir, self.every = run_dir, every
        self.latest, self.thread = None, None
        self.lock = threading.Lock()

    def _look(self):
        ports = endpoints(self.run_dir)
        res = check_http(ports) if ports else None
        with self.lock:
            self.latest = res

    def _loop(self):
        while True:
            time.sleep(self.every)
            try:
                self._look()
            except Exception:
                with self.lock:
                    self.latest = None

    def read(self):
        if self.thread is None:
            self._look()
            self.thread = threading.Thread(target=self._loop, name="signals-http", daemon=True)
            self.thread.start()
        with self.lock:
            return self.latest


class Signals:
    def __init__(self, run_dir, proc_root="/proc", http_every=HTTP_EVERY_S):
        self.broadcasts = Broadcasts(run_dir)
        self.roles = Roles(proc_root)
        self.http = Http(run_dir, http_every)

    def sample(self, errors, attempt, sid=None):
        self.roles.sid = sid if isinstance(sid, int) and sid > 0 else None
        """The sample's "signals" field; ``attempt(errors, label, fn)`` is the probe's _try."""
        return {
            "broadcast": attempt(errors, "broadcasts", self.broadcasts.read),
            "roles": attempt(errors, "roles", self.roles.read),
            "http": attempt(errors, "endpoints", self.http.read),
        }
