"""Pod-side launch, start and kill of the lifecycle helper, each in ONE exec (stdlib only, Python 3.6+).

Uploaded next to ``lifecycle.py`` (same directory, one content hash) and imported by it. Over SSH
every exec costs a session (the login shell's rc files, a python start-up): ``launch`` therefore takes the
pod's action lock, runs the pre-flight (streaming each check as it is done), writes the config it got on
stdin with the secrets, and starts the run, in one process; ``kill`` takes the lock, signals the run's
group, waits through the grace period and checks the GPUs, streaming its progress.

Protocol: the client writes one JSON line on stdin and keeps stdin open; it closing stdin (cancelled, or
its SSH session died) stops the action before anything irreversible. Every output line is one JSON
object with an ``event`` key. Secrets stay in memory: the run's leader is forked from here with them in
its environment (setsid), or gets them through a FIFO (tmux).
"""

import base64
import errno
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

if __package__:  # imported from the repo (services.pod.agent.actions)
    from . import podlock
else:  # on the pod, imported by lifecycle.py: its siblings are beside it, on sys.path
    import podlock


# ------------------------------------------------------------------------------------ stdin
def read_request():
    """The request line, read without buffering past it (stdin stays open: see client_gone)."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(0, 65536)
        if not chunk:
            break
        buf += chunk
    return json.loads(buf.decode("utf-8") or "{}")


def client_gone():
    """True when our stdin reached EOF: the client cancelled or its session died."""
    try:
        ready, _, _ = select.select([0], [], [], 0)
        return bool(ready) and not os.read(0, 4096)
    except (OSError, ValueError):
        return True


# ------------------------------------------------------------------------------------ the lock
def _locked(agent, req):
    """The lock for this request (None when the client holds it already), or None after a refusal."""
    spec = req.get("lock")
    if not spec:
        return True, None
    fd, info = podlock.take_lock(agent.STATE, spec.get("action", "?"), spec.get("owner", ""))
    if fd is None:
        agent.out({"event": "locked", "held_by": info})
        return False, None
    agent.out({"event": "lock", "lock": info})
    return True, fd


# ------------------------------------------------------------------------------------ start
def render(template, **values):
    """Same as services.lifecycle.command.render: {config}/{run_dir} shell-quoted, other braces kept."""
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", shlex.quote(str(value)))
    return out


def write_file(path, data, mode=0o644):
    """Atomically: a temp name beside it, then rename."""
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def start_run(agent, rec, secrets, mode):
    """Start the run detached; returns {"ok": True, "record": rec} or {"ok": False, "error": ...}."""
    for other in agent._records():
        if other.get("id") != rec["id"] and agent._alive(other):
            return {
                "ok": False,
                "error": "another run is active on this pod: %s (%s)" % (other.get("id"), other.get("run_dir")),
            }
    ptt = os.path.join(rec["run_dir"], ".ptt")
    os.makedirs(ptt, exist_ok=True)
    rec["log"] = rec.get("log") or os.path.join(ptt, "console.log")
    for stale in ("leader.json", "exit_code"):
        try:
            os.unlink(os.path.join(ptt, stale))
        except OSError:
            pass
    record_path = os.path.join(ptt, "run.json")
    use_tmux = mode == "tmux" or (mode == "auto" and shutil.which("tmux"))
    rec["method"] = "tmux" if use_tmux else "setsid"
    if use_tmux:
        rec["tmux_session"] = "ptt-" + rec["id"]
    agent._write_json(record_path, rec)
    leader = _start_tmux(agent, rec, record_path, secrets) if use_tmux else _start_setsid(agent, rec, secrets)
    if "error" in leader:
        return {"ok": False, "error": leader["error"]}
    rec.update(pid=leader["pid"], sid=leader["sid"], pgid=leader["pgid"], pid_start=leader["start"])
    agent._write_json(record_path, rec)
    agent._write_json(os.path.join(agent.STATE, "runs", rec["id"] + ".json"), rec)
    return {"ok": True, "record": rec}


def default_signals():
    """What subprocess's restore_signals does: python ignores SIGPIPE and SIGXFSZ, and an ignored signal
    stays ignored across exec -- the trainer (and ``cmd | head`` in its scripts) must get the defaults."""
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


def leader_script(rec):
    exit_file = os.path.join(rec["run_dir"], ".ptt", "exit_code")
    return "%s\nrc=$?\necho $rc > %s\nexit $rc\n" % (rec["command"], shlex.quote(exit_file))


def _start_setsid(agent, rec, secrets):
    """fork + setsid + exec here (no second python start-up): the leader is a session leader whose
    environment holds the secrets; a close-on-exec pipe says when it exec'd (or why it could not)."""
    env = dict(os.environ)
    env.update(rec.get("env") or {})
    env.update(secrets)
    logf = os.open(rec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    rfd, wfd = os.pipe()  # both close-on-exec
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:  # the leader
        try:
            os.close(rfd)
            os.setsid()
            default_signals()
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(logf, 1)
            os.dup2(logf, 2)
            agent._raise_nofile(int(rec.get("nofile") or 0))
            try:
                os.unlink(os.path.join(rec["run_dir"], ".ptt", "exit_code"))
            except OSError:
                pass
            os.chdir(rec.get("cwd") or os.path.expanduser("~"))
            os.execve("/bin/sh", ["/bin/sh", "-c", leader_script(rec)], env)
        except BaseException as exc:  # noqa: B902 - report anything, never return into the helper
            try:
                os.write(wfd, ("%s: %s" % (type(exc).__name__, exc)).encode("utf-8", "replace"))
            finally:
                os._exit(127)
    os.close(wfd)
    os.close(logf)
    err = b""
    while True:
        chunk = os.read(rfd, 4096)
        if not chunk:
            break
        err += chunk
    os.close(rfd)
    if err:
        return {"error": "the run did not start: " + err.decode("utf-8", "replace")}
    st = agent._stat(pid)
    if st is None:  # exec'd and already gone (reaped below): report what we know
        st = {"sid": pid, "pgid": pid, "start": 0}
    leader = {"pid": pid, "sid": st["sid"], "pgid": st["pgid"], "start": st["start"]}
    agent._write_json(os.path.join(rec["run_dir"], ".ptt", "leader.json"), leader)
    return leader


def _start_tmux(agent, rec, record_path, secrets):
    data = json.dumps(secrets).encode("utf-8")
    me = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lifecycle.py")
    tmp = tempfile.mkdtemp(prefix="ptt-")  # 0700; the FIFO inside stores nothing on disk
    fifo = os.path.join(tmp, "env")
    os.mkfifo(fifo, 0o600)
    try:
        inner = " ".join(shlex.quote(a) for a in [sys.executable, me, "child", "--record", record_path, "--fifo", fifo])
        p = subprocess.run(
            ["tmux", "new-session", "-d", "-s", rec["tmux_session"], "-x", "200", "-y", "50", inner],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if p.returncode != 0:
            return {"error": "tmux failed: " + p.stderr.decode("utf-8", "replace").strip()}
        deadline = time.time() + 10
        fd = None
        while fd is None:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO or time.time() > deadline:
                    return {"error": "the run did not start in tmux"}
                time.sleep(0.01)
        os.set_blocking(fd, True)
        os.write(fd, data)
        os.close(fd)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    leader_path = os.path.join(rec["run_dir"], ".ptt", "leader.json")
    deadline = time.time() + 10
    while not os.path.exists(leader_path):
        if time.time() > deadline:
            return {"error": "the run's leader did not report in 10 s; see " + rec["log"]}
        time.sleep(0.01)
    with open(leader_path) as fh:
        return json.load(fh)


# ------------------------------------------------------------------------------------ launch
def cmd_launch(agent):
    """Lock, pre-flight (streamed), config, start: one exec. See the module docstring."""
    import preflight as pre

    req = read_request()
    ok, lock = _locked(agent, req)
    if not ok:
        return 5
    try:
        return _launch(agent, pre, req)
    finally:
        podlock.drop_lock(lock)


def _launch(agent, pre, req):
    out = agent.out
    rec = dict(req.get("record") or {})
    run_dir = os.path.abspath(os.path.expanduser(req["run_dir"]))
    cfg = req.get("config") or {}
    remote = req.get("remote_config") or "%s/.ptt/config/%s/%s" % (run_dir, cfg.get("hash"), cfg.get("name"))
    base = req.get("base_command") or render(req.get("template") or "", config=remote, run_dir=run_dir)
    command = (base + " " + req["suffix"]) if req.get("suffix") else base
    args = agent.parser().parse_args(
        ["preflight"] + list(req.get("preflight") or []) + ["--run-dir", run_dir, "--trainer", base]
    )  # the last ones win
    checks, info = pre.run_checks(args, agent, lambda c: out({"event": "check", "check": c}))
    data = base64.b64decode(cfg["data"]) if cfg.get("data") is not None else None
    if req.get("dry_run"):
        if any(c["name"] == "trainer command" and c["status"] == "fail" for c in checks):
            check = {
                "name": DRY_RUN,
                "status": "skip",
                "detail": "not run: the launch command was not found",
                "fix": "",
            }
        else:
            if data is not None and _read_bytes(remote) != data:
                write_file(remote, data)  # the dry run reads it where the run will
            env = dict(os.environ)
            env.update(rec.get("env") or {})
            env.update(req.get("secrets") or {})
            check = dry_run(command, env, info["home"], float(req["dry_run"].get("timeout") or 300))
        checks.append(check)
        out({"event": "check", "check": check})
    failed = [c["name"] for c in checks if c["status"] == "fail"]
    out(
        {
            "event": "checked",
            "failed": failed,
            "run_dir": run_dir,
            "home": info["home"],
            "config": remote,
            "command": command,
            "base_command": base,
        }
    )
    if failed and not req.get("force"):
        out({"event": "stopped"})
        return 0
    if client_gone():
        return 6
    if data is not None:
        if _read_bytes(remote) != data:  # missing (a wiped volume, another pod) or not the launch's
            write_file(remote, data)
        out({"event": "config", "path": remote})
    if not os.path.isfile(remote):  # never start a run on a config that is not there
        out(
            {
                "event": "error",
                "missing_config": remote,
                "error": "the run's config %s is not on the pod and none was sent" % remote,
            }
        )
        return 4
    rec.update(
        run_dir=run_dir,
        config=remote,
        command=command,
        base_command=base,
        cwd=info["home"],
        log=rec.get("log") or os.path.join(run_dir, ".ptt", "console.log"),
    )
    result = start_run(agent, rec, req.get("secrets") or {}, req.get("mode") or "auto")
    out(dict(result, event="started" if result.get("ok") else "error"))
    if not result.get("ok"):
        return 4
    return _watch(agent, rec, float(req.get("watch") or 0.0))


DRY_RUN = "prime-rl accepts the config"
DRY_RUN_LINES, DRY_RUN_LINE_CHARS = 80, 500


def dry_run(command, env, cwd, timeout):
    """prime-rl's own validation by the version installed here: ``<command> --dry-run`` (it "only validates
    and dumps resolved configs"), in its own process group (uv starts children), killed after ``timeout``.
    A check; a refusal carries the end of the output (``output``: at most 80 lines of 500 characters)."""
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command + " --dry-run"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return {"name": DRY_RUN, "status": "warn", "detail": "the dry run did not start: %s" % exc, "fix": ""}
    try:
        raw, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        return {
            "name": DRY_RUN,
            "status": "warn",
            "fix": "raise [lifecycle] dry_run_timeout if it needs longer",
            "detail": "prime-rl's dry run did not finish within %g s (not judged)" % timeout,
        }
    if proc.returncode == 0:
        return {
            "name": DRY_RUN,
            "status": "ok",
            "fix": "",
            "detail": "the dry run of prime-rl installed on the pod validates it",
        }
    lines = [ln[:DRY_RUN_LINE_CHARS] for ln in raw.decode("utf-8", "replace").splitlines()][-DRY_RUN_LINES:]
    return {
        "name": DRY_RUN,
        "status": "fail",
        "code": proc.returncode,
        "output": lines,
        "detail": "prime-rl's dry run exited with code %d" % proc.returncode,
        "fix": "",
    }


def _read_bytes(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _watch(agent, rec, seconds):
    """Watch the started run for ``seconds`` (at most 10): one that already ended non-zero (a missing
    file, a bad flag) is reported as ``exited`` with its log's tail; else ``settled``."""
    exit_file = os.path.join(rec["run_dir"], ".ptt", "exit_code")
    t0 = time.time()
    deadline = t0 + min(max(seconds, 0.0), 10.0)
    code = None
    while True:
        text = _read_bytes(exit_file)
        if text and text.strip().lstrip(b"-").isdigit():
            code = int(text.strip())
            break
        if time.time() >= deadline:
            break
        time.sleep(0.05)
    if code is None or code == 0:
        agent.out({"event": "settled", "running": code is None, "code": code, "after": time.time() - t0})
        return 0
    tail = (_read_bytes(rec["log"]) or b"")[-8192:].decode("utf-8", "replace").splitlines()
    agent.out(
        {
            "event": "exited",
            "code": code,
            "after": time.time() - t0,
            "tail": [line[-300:] for line in tail if line.strip()][-12:],
        }
    )
    return 4


# ------------------------------------------------------------------------------------ kill
def _signal(agent, rec, sig):
    pids = agent._alive(rec)
    if pids:
        try:
            os.killpg(int(rec["pgid"]), sig)
        except (OSError, KeyError, TypeError, ValueError):
            pass
        for p in pids:  # processes that left the group but not the session
            try:
                os.kill(p, sig)
            except OSError:
                pass
    return pids


def _record_state(agent, rec, state, **more):
    """The run's state in both of the pod's copies of its record (the registry and <run>/.ptt/run.json), so the
    probe -- whichever machine watches, the headless watcher too -- knows a kill was ours, not a crash."""
    rec.update(state=state, **{k: v for k, v in more.items() if v is not None})
    for path in (
        os.path.join(agent.STATE, "runs", str(rec.get("id")) + ".json"),
        os.path.join(str(rec.get("run_dir") or ""), ".ptt", "run.json"),
    ):
        if os.path.isdir(os.path.dirname(path)):
            try:
                agent._write_json(path, rec)
            except OSError:
                pass  # a full disk costs the note, never the kill


def _tmux_gone(rec):
    if rec.get("tmux_session") and shutil.which("tmux"):
        subprocess.run(
            ["tmux", "kill-session", "-t", rec["tmux_session"]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )


def cmd_kill(agent):
    """Lock, SIGTERM to the run's group, the grace period (progress streamed), SIGKILL, GPU check."""
    req = read_request()
    ok, lock = _locked(agent, req)
    if not ok:
        return 5
    try:
        return _kill(agent, req)
    finally:
        podlock.drop_lock(lock)


def _kill(agent, req):
    out = agent.out
    active = [
        r for r in agent._records() if agent._alive(r) and (not req.get("run_id") or r.get("id") == req["run_id"])
    ]
    if not active:
        out({"event": "none"})
        return 3
    rec = sorted(active, key=lambda r: r.get("started", 0))[-1]
    _record_state(agent, rec, "killing", killed_by=(req.get("lock") or {}).get("owner"))  # before the signal:
    # the processes' exit is then no crash to whoever watches
    pids = _signal(agent, rec, signal.SIGTERM)
    out({"event": "term", "run": rec.get("id"), "pgid": rec.get("pgid"), "pids": pids})
    grace = float(req.get("grace", 30.0))
    left, deadline, shown, told = agent._alive(rec), time.time() + grace, len(pids), time.time()
    while left and time.time() < deadline:
        if client_gone():
            return 6
        time.sleep(0.02)
        left = agent._alive(rec)
        if left and (len(left) != shown or time.time() - told >= 0.5):
            shown, told = len(left), time.time()
            out({"event": "left", "pids": left, "remaining": max(0.0, deadline - time.time())})
    if left:
        if client_gone():
            return 6
        out({"event": "sigkill", "pids": left, "grace": grace})
        _signal(agent, rec, signal.SIGKILL)
        end = time.time() + 5
        while left and time.time() < end:
            time.sleep(0.02)
            left = agent._alive(rec)
    _tmux_gone(rec)  # the session (and its pane's shell) goes too
    if not left:
        _record_state(agent, rec, "killed", ended=time.time())
    out({"event": "gone", "run": rec.get("id"), "pids": pids, "left": left})
    if left:
        return 4
    gpu = gpu_pids()
    ours = set(pids)
    settle = time.time() + GPU_SETTLE_S  # the driver may list a pid for a moment while its context goes
    while gpu.get("ok") and ours & set(gpu["pids"]) and time.time() < settle:
        time.sleep(0.5)
        gpu = gpu_pids()
    out(dict(gpu, event="gpu"))
    return 0


GPU_SETTLE_S = 3.0


def gpu_pids():
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": False, "error": str(exc)}
    if p.returncode != 0:
        return {"ok": False, "error": (p.stdout + p.stderr).decode("utf-8", "replace").strip()[:300]}
    return {"ok": True, "pids": [int(x) for x in p.stdout.decode().split() if x.strip().isdigit()]}
