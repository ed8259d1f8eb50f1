"""Pod-side helper for launch / kill / resume / cleanup (stdlib only, Python 3.6+).

Uploaded by SFTP under its content hash (like the probe) and run as ``python3 lifecycle-<hash>.py CMD
...``. Every command prints ONE JSON object on stdout. Secrets never touch the pod's disk: ``start``
reads them as JSON on its stdin and hands them to the run's leader over a pipe (setsid path) or a FIFO
(tmux path: a FIFO carries bytes through the kernel, nothing is stored), and the leader puts them in
its environment and execs the command. Records hold variable NAMES only.

Run records: ``<state>/runs/<id>.json`` (the pod-wide registry behind "no other run active") and a copy in
``<run_dir>/.ptt/run.json``. A run's processes are every process of the leader's session (the leader
calls setsid, or is a tmux pane, which is a session leader); torchrun/vLLM children stay in it.
"""
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

STATE = os.path.expanduser(os.environ.get("PTT_STATE_DIR") or "~/.cache/prime-train-tui")


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------------------------------ processes
def _stat(pid):
    """(sid, pgid, starttime, state) of a pid, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    rest = data[data.rfind(")") + 2:].split()
    # rest[0] = state (field 3); pgid field 5, sid field 6, starttime field 22
    return {"state": rest[0], "pgid": int(rest[2]), "sid": int(rest[3]), "start": int(rest[19])}


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def run_pids(sid, pgid=None):
    """Live (non-zombie) pids of the run: same session, or same process group."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is None or st["state"] == "Z":
            continue
        if st["sid"] == sid or (pgid is not None and st["pgid"] == pgid):
            pids.append(int(name))
    return sorted(pids)


def checkpoint_complete(path):
    """Same rule as services/probe.py: trainer/.metadata and orchestrator/progress.pt, or STABLE."""
    if os.path.isfile(os.path.join(path, "STABLE")):
        return True
    trainer, orch = os.path.join(path, "trainer"), os.path.join(path, "orchestrator")
    has_trainer, has_orch = os.path.isdir(trainer), os.path.isdir(orch)
    if not (has_trainer or has_orch):
        return False
    if has_trainer and not os.path.isfile(os.path.join(trainer, ".metadata")):
        return False
    return not has_orch or os.path.isfile(os.path.join(orch, "progress.pt"))


def du(path):
    total = 0
    for root, dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


# ------------------------------------------------------------------------------------ records
def _records():
    d = os.path.join(STATE, "runs")
    recs = []
    try:
        names = os.listdir(d)
    except OSError:
        return recs
    for n in names:
        if n.endswith(".json"):
            try:
                with open(os.path.join(d, n)) as fh:
                    recs.append(json.load(fh))
            except (OSError, ValueError):
                pass
    return recs


def _write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _alive(rec):
    sid = rec.get("sid")
    if not sid:
        return []
    return run_pids(int(sid), rec.get("pgid"))


def cmd_status(args):
    runs = []
    for rec in _records():
        if args.run_id and rec.get("id") != args.run_id:
            continue
        pids = _alive(rec)
        exit_code = None
        try:
            with open(os.path.join(rec["run_dir"], ".ptt", "exit_code")) as fh:
                exit_code = int(fh.read().strip() or "0")
        except (OSError, ValueError, KeyError):
            pass
        rec = dict(rec, active=bool(pids), pids=pids, exit_code=exit_code)
        rec["procs"] = [{"pid": p, "cmd": _cmdline(p)[:200]} for p in pids[:50]]
        runs.append(rec)
    runs.sort(key=lambda r: r.get("started", 0))
    out({"runs": runs})


# ------------------------------------------------------------------------------------ start
def _raise_nofile(want):
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, ValueError, OSError):
        pass


def cmd_child(args):
    """The run's leader: read secrets, set limits, write the pid file, exec the command."""
    with open(args.record) as fh:
        rec = json.load(fh)
    if args.fifo:
        with open(args.fifo, "rb") as fh:
            raw = fh.read()
    else:
        raw = sys.stdin.buffer.read()
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
    secrets = json.loads(raw.decode("utf-8") or "{}")
    env = dict(os.environ)
    env.update(rec.get("env") or {})
    env.update(secrets)
    _raise_nofile(int(rec.get("nofile") or 0))
    ptt = os.path.join(rec["run_dir"], ".ptt")
    exit_file = os.path.join(ptt, "exit_code")
    try:
        os.unlink(exit_file)
    except OSError:
        pass
    st = _stat(os.getpid())
    _write_json(os.path.join(ptt, "leader.json"),
                {"pid": os.getpid(), "sid": st["sid"], "pgid": st["pgid"], "start": st["start"]})
    os.chdir(rec.get("cwd") or os.path.expanduser("~"))
    q = "'" + exit_file.replace("'", "'\\''") + "'"
    script = "%s\nrc=$?\necho $rc > %s\nexit $rc\n" % (rec["command"], q)
    if args.fifo:  # tmux: show the output in the pane and keep a copy in the console log
        lq = "'" + rec["log"].replace("'", "'\\''") + "'"
        script = "( %s\n) 2>&1 | tee -a %s\n" % (script, lq)
    os.execvpe("/bin/sh", ["/bin/sh", "-c", script], env)


def cmd_start(args):
    raw = sys.stdin.buffer.read()  # {"secrets": {...}, "record": {...}}
    payload = json.loads(raw.decode("utf-8"))
    secrets, rec = payload.get("secrets") or {}, payload["record"]
    for other in _records():
        if other.get("id") != rec["id"] and _alive(other):
            out({"ok": False, "error": "another run is active on this pod: %s (%s)"
                 % (other.get("id"), other.get("run_dir"))})
            return 3
    ptt = os.path.join(rec["run_dir"], ".ptt")
    os.makedirs(ptt, exist_ok=True)
    rec["log"] = rec.get("log") or os.path.join(ptt, "console.log")
    for stale in ("leader.json", "exit_code"):
        try:
            os.unlink(os.path.join(ptt, stale))
        except OSError:
            pass
    record_path = os.path.join(ptt, "run.json")
    use_tmux = args.mode == "tmux" or (args.mode == "auto" and shutil.which("tmux"))
    rec["method"] = "tmux" if use_tmux else "setsid"
    if use_tmux:
        rec["tmux_session"] = "ptt-" + rec["id"]
    _write_json(record_path, rec)
    data = json.dumps(secrets).encode("utf-8")
    me = os.path.abspath(__file__)
    if use_tmux:
        tmp = tempfile.mkdtemp(prefix="ptt-")  # 0700; the FIFO inside stores nothing on disk
        fifo = os.path.join(tmp, "env")
        os.mkfifo(fifo, 0o600)
        try:
            inner = " ".join(_q(a) for a in [sys.executable, me, "child", "--record", record_path, "--fifo", fifo])
            p = subprocess.run(["tmux", "new-session", "-d", "-s", rec["tmux_session"], "-x", "200", "-y", "50",
                                inner], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
            if p.returncode != 0:
                out({"ok": False, "error": "tmux failed: " + p.stderr.decode("utf-8", "replace").strip()})
                return 4
            deadline = time.time() + 10
            fd = None
            while fd is None:
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as exc:
                    if exc.errno != errno.ENXIO or time.time() > deadline:
                        out({"ok": False, "error": "the run did not start in tmux"})
                        return 4
                    time.sleep(0.01)
            os.set_blocking(fd, True)
            os.write(fd, data)
            os.close(fd)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        logf = open(rec["log"], "ab")
        proc = subprocess.Popen([sys.executable, me, "child", "--record", record_path],
                                stdin=subprocess.PIPE, stdout=logf, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
        proc.stdin.write(data)
        proc.stdin.close()
        logf.close()
    leader_path = os.path.join(ptt, "leader.json")
    deadline = time.time() + 10
    while not os.path.exists(leader_path):
        if time.time() > deadline:
            out({"ok": False, "error": "the run's leader did not report in 10 s; see " + rec["log"]})
            return 4
        time.sleep(0.01)
    with open(leader_path) as fh:
        leader = json.load(fh)
    rec.update(pid=leader["pid"], sid=leader["sid"], pgid=leader["pgid"], pid_start=leader["start"])
    _write_json(record_path, rec)
    _write_json(os.path.join(STATE, "runs", rec["id"] + ".json"), rec)
    out({"ok": True, "record": rec})
    return 0


def _q(s):
    return "'" + str(s).replace("'", "'\\''") + "'"


# ------------------------------------------------------------------------------------ kill
def _find(run_id):
    for rec in _records():
        if rec.get("id") == run_id:
            return rec
    return None


def cmd_signal(args):
    rec = _find(args.run_id)
    if rec is None:
        out({"ok": False, "error": "no run %s on this pod" % args.run_id})
        return 3
    sig = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "INT": signal.SIGINT}[args.sig]
    pids = _alive(rec)
    sent = []
    if pids:
        try:
            os.killpg(int(rec["pgid"]), sig)
        except (OSError, KeyError, TypeError):
            pass
        for p in pids:  # processes that left the group but not the session
            try:
                os.kill(p, sig)
                sent.append(p)
            except OSError:
                pass
    if args.sig == "KILL" and rec.get("tmux_session") and shutil.which("tmux"):
        subprocess.run(["tmux", "kill-session", "-t", rec["tmux_session"]], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    out({"ok": True, "pids": pids, "sent": sent, "left": _alive(rec)})
    return 0


def cmd_gpu_pids(args):
    try:
        p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        out({"ok": False, "error": str(exc)})
        return 0
    if p.returncode != 0:
        out({"ok": False, "error": (p.stdout + p.stderr).decode("utf-8", "replace").strip()[:300]})
        return 0
    pids = [int(x) for x in p.stdout.decode().split() if x.strip().isdigit()]
    out({"ok": True, "pids": pids})
    return 0


# ------------------------------------------------------------------------------------ checkpoints
def list_ckpts(ckpt_dir):
    found = []
    try:
        names = os.listdir(ckpt_dir)
    except OSError:
        return found
    for n in names:
        if not n.startswith("step_") or not n[5:].isdigit():
            continue
        p = os.path.join(ckpt_dir, n)
        if not os.path.isdir(p):
            continue
        try:
            mtime = os.stat(p).st_mtime
        except OSError:
            continue
        found.append({"step": int(n[5:]), "path": p, "complete": checkpoint_complete(p), "bytes": du(p),
                      "mtime": mtime})
    found.sort(key=lambda c: c["step"])
    return found


def cmd_ckpts(args):
    out({"ok": True, "ckpt_dir": args.ckpt_dir, "ckpts": list_ckpts(args.ckpt_dir)})
    return 0


def cmd_delete(args):
    """Delete step dirs, re-checking here that each is complete and older than the N newest complete."""
    ckpts = list_ckpts(args.ckpt_dir)
    complete = [c["step"] for c in ckpts if c["complete"]]
    keep = set(complete[-max(1, args.keep):])
    by_step = {c["step"]: c for c in ckpts}
    deleted, refused = [], []
    for step in args.steps:
        c = by_step.get(step)
        if c is None:
            refused.append({"step": step, "reason": "not found"})
        elif not c["complete"]:
            refused.append({"step": step, "reason": "not complete (in progress?)"})
        elif step in keep or not complete or step >= max(complete):
            refused.append({"step": step, "reason": "among the newest %d complete" % max(1, args.keep)})
        else:
            size = du(c["path"])
            try:
                shutil.rmtree(c["path"])
                deleted.append({"step": step, "path": c["path"], "bytes": size})
            except OSError as exc:
                refused.append({"step": step, "reason": str(exc)})
    out({"ok": True, "deleted": deleted, "refused": refused})
    return 0


# ------------------------------------------------------------------------------------ preflight
def cmd_preflight(args):
    import resource
    checks = []

    def add(name, status, detail, fix=""):
        checks.append({"name": name, "status": status, "detail": detail, "fix": fix})

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    want = args.min_nofile
    if soft == inf or soft >= want:
        add("ulimit -n", "ok", "open files %s" % ("unlimited" if soft == inf else soft))
    elif hard == inf or hard >= want:
        add("ulimit -n", "ok", "open files %d, raised to %d for the run (hard limit %s)"
            % (soft, want, "unlimited" if hard == inf else hard))
    else:
        add("ulimit -n", "fail", "open files %d, hard limit %d < %d" % (soft, hard, want),
            "raise the hard limit: add '* hard nofile %d' to /etc/security/limits.conf (or the container's "
            "--ulimit nofile=%d:%d) and reconnect" % (want, want, want))

    smi = shutil.which("nvidia-smi")
    if not smi:
        add("GPUs visible", "fail", "nvidia-smi not found",
            "install the NVIDIA driver / use a GPU image; check `nvidia-smi` works on the pod")
    else:
        try:
            p = subprocess.run([smi, "-L"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
            gpus = [l for l in p.stdout.decode("utf-8", "replace").splitlines() if l.startswith("GPU ")]
            if p.returncode == 0 and gpus:
                add("GPUs visible", "ok", "%d GPU(s): %s" % (len(gpus), gpus[0].split("(")[0].strip()))
            else:
                err = (p.stderr or p.stdout).decode("utf-8", "replace").strip().splitlines()
                add("GPUs visible", "fail", "nvidia-smi -L: %s" % (err[0] if err else "no GPUs"),
                    "check the driver (`nvidia-smi`), CUDA_VISIBLE_DEVICES and the container's --gpus")
        except (OSError, subprocess.TimeoutExpired) as exc:
            add("GPUs visible", "fail", "nvidia-smi: %s" % exc, "check the driver with `nvidia-smi`")

    if args.cuda:
        code = ("import importlib.util,sys\n"
                "if importlib.util.find_spec('torch') is None: print('NOTORCH'); sys.exit(0)\n"
                "import torch\n"
                "print('OK %d' % torch.cuda.device_count() if torch.cuda.is_available() and "
                "torch.zeros(1).cuda() is not None else 'NOCUDA')\n")
        try:
            p = subprocess.run([args.python or sys.executable, "-c", code], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=120)
            res = p.stdout.decode("utf-8", "replace").strip()
            if res.startswith("NOTORCH"):
                add("CUDA context", "skip", "torch is not importable by %s" % (args.python or "python3"),
                    "activate the training venv (e.g. `uv sync`) to have this checked")
            elif res.startswith("OK"):
                add("CUDA context", "ok", "torch sees %s GPU(s)" % res.split()[1])
            else:
                tail = p.stderr.decode("utf-8", "replace").strip().splitlines()
                add("CUDA context", "fail", "torch cannot create a CUDA context: %s" % (tail[-1] if tail else res),
                    "check the driver/CUDA versions match torch's build (`python -c 'import torch; "
                    "print(torch.version.cuda)'`)")
        except (OSError, subprocess.TimeoutExpired) as exc:
            add("CUDA context", "fail", str(exc), "check that python3 and torch start on the pod")

    args.run_dir = os.path.abspath(os.path.expanduser(args.run_dir))
    per = args.ckpt_bytes
    if not per and args.ckpt_dir:
        ckdir = args.ckpt_dir if os.path.isabs(args.ckpt_dir) else os.path.join(args.run_dir, args.ckpt_dir)
        done = [c for c in list_ckpts(ckdir) if c["complete"]]
        per = done[-1]["bytes"] if done else 0
    args.need_bytes = max(args.need_bytes, args.expected_ckpts * per)
    path = args.run_dir
    while path and not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    try:
        st = os.statvfs(path or "/")
        free = st.f_bavail * st.f_frsize
        total = st.f_blocks * st.f_frsize
        need = args.need_bytes
        if free >= need:
            add("free disk", "ok", "%s free on %s, %s needed" % (_gib(free), path, _gib(need)))
        else:
            add("free disk", "fail", "%s free on %s, %s needed for the expected checkpoints"
                % (_gib(free), path, _gib(need)),
                "free space (`prime-train-tui cleanup POD --keep 2`), pick a bigger volume, or lower "
                "[lifecycle] expected_ckpts")
        checks[-1]["free"] = free
        checks[-1]["total"] = total
    except OSError as exc:
        add("free disk", "fail", str(exc), "check the run directory's volume")

    words = [w for w in args.trainer.split() if "=" not in w.split("/")[0]] if args.trainer else []
    exe = words[0] if words else ""
    if not exe:
        add("trainer command", "fail", "empty launch command", "set [lifecycle] command in settings")
    elif (os.path.isabs(exe) and os.access(exe, os.X_OK)) or shutil.which(exe):
        detail = "%s → %s" % (exe, shutil.which(exe) or exe)
        missing = [w for w in words[1:3] if w.endswith(".py") and os.path.isabs(w) and not os.path.exists(w)]
        if missing:
            add("trainer command", "fail", "%s not found" % missing[0], "check the launch command's path")
        else:
            add("trainer command", "ok", detail)
    else:
        fix = ("install uv: curl -LsSf https://astral.sh/uv/install.sh | sh, then `uv sync` in prime-rl"
               if exe == "uv" else "install %s on the pod or fix [lifecycle] command" % exe)
        add("trainer command", "fail", "%s not found on PATH" % exe, fix)

    active = [r for r in _records() if _alive(r)]
    if active:
        r = active[0]
        add("no other run active", "fail", "run %s is active in %s (pid %s)" % (r.get("id"), r.get("run_dir"),
                                                                              r.get("pid")),
            "kill it first: prime-train-tui kill POD")
    else:
        add("no other run active", "ok", "no run of ours is active")

    for spec in args.check or []:
        c = json.loads(spec)
        try:
            p = subprocess.run(["/bin/sh", "-c", c["run"]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=float(c.get("timeout") or 30), cwd=args.run_dir if os.path.isdir(args.run_dir)
                               else None)
            text = p.stdout.decode("utf-8", "replace").strip().splitlines()
            if p.returncode == 0:
                add(c["name"], "ok", text[-1][:200] if text else "passed")
            else:
                add(c["name"], "fail", (text[-1][:200] if text else "exit %d" % p.returncode),
                    c.get("fix") or "see `%s`" % c["run"])
        except subprocess.TimeoutExpired:
            add(c["name"], "fail", "timed out", c.get("fix") or "")
    out({"ok": True, "checks": checks, "run_dir": args.run_dir, "home": os.path.expanduser("~"),
         "nofile": [None if soft == inf else soft, None if hard == inf else hard]})
    return 0


def _gib(n):
    return "%.1f GiB" % (n / 2.0 ** 30)


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    p = sub.add_parser("status")
    p.add_argument("--run-id")
    p = sub.add_parser("start")
    p.add_argument("--mode", choices=("auto", "tmux", "setsid"), default="auto")
    p = sub.add_parser("child")
    p.add_argument("--record", required=True)
    p.add_argument("--fifo")
    p = sub.add_parser("signal")
    p.add_argument("--run-id", required=True)
    p.add_argument("--sig", choices=("TERM", "KILL", "INT"), default="TERM")
    sub.add_parser("gpu-pids")
    p = sub.add_parser("ckpts")
    p.add_argument("--ckpt-dir", required=True)
    p = sub.add_parser("delete")
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--keep", type=int, required=True)
    p.add_argument("steps", type=int, nargs="*")
    p = sub.add_parser("preflight")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--min-nofile", type=int, default=65536)
    p.add_argument("--need-bytes", type=int, default=0, help="at least this much free")
    p.add_argument("--ckpt-dir", default="", help="relative to the run dir unless absolute")
    p.add_argument("--expected-ckpts", type=int, default=0)
    p.add_argument("--ckpt-bytes", type=int, default=0, help="0 = size of the newest complete one")
    p.add_argument("--trainer", default="")
    p.add_argument("--cuda", action="store_true")
    p.add_argument("--python")
    p.add_argument("--check", action="append")
    a = ap.parse_args(argv)
    fn = {"status": cmd_status, "start": cmd_start, "child": cmd_child, "signal": cmd_signal,
          "gpu-pids": cmd_gpu_pids, "ckpts": cmd_ckpts, "delete": cmd_delete,
          "preflight": cmd_preflight}.get(a.cmd)
    if fn is None:
        ap.print_usage(sys.stderr)
        return 2
    return fn(a) or 0


if __name__ == "__main__":
    sys.exit(main())
