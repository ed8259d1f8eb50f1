"""Pod-side helper for launch / kill / resume / cleanup (stdlib only, Python 3.6+).

Uploaded by SFTP with its siblings (actions.py, preflight.py and
common.py, what all pod scripts share) into ``lifecycle-<hash>/``, named by the hash of them all,
and run as ``python3 lifecycle-<hash>/lifecycle.py CMD ...``. Every command prints ONE JSON
object on stdout, except ``launch`` and ``kill`` (in the sibling ``actions.py``), which
stream JSON lines. Secrets never touch the pod's disk: ``launch`` and ``start`` read them as JSON on
stdin; the run's leader is forked with them in its environment (setsid path) or reads them from a FIFO
(tmux path: a FIFO carries bytes through the kernel, nothing is stored), then execs the command.
Records hold variable NAMES only.

Run records: ``<state>/runs/<id>.json`` (the pod-wide registry behind "no other run active") and a copy in
``<run_dir>/.ptt/run.json``. A run's processes are every process of the leader's session (the leader
calls setsid, or is a tmux pane, which is a session leader); torchrun/vLLM children stay in it.
"""

import json
import os
import shutil
import signal
import sys
import time

if __package__:  # imported from the repo (services.pod.agent.lifecycle)
    from .common import checkpoint_complete, has_orchestrator, step_dirs, trainer_ckpt_dir
else:  # run on the pod: its siblings were uploaded beside it, and a script's own dir is sys.path[0]
    if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # loaded by path, not run
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    sys.dont_write_bytecode = True  # no __pycache__ in the pod's hashed dir: it holds what was uploaded
    from common import checkpoint_complete, has_orchestrator, step_dirs, trainer_ckpt_dir

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
    rest = data[data.rfind(")") + 2 :].split()
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


def du(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


# ------------------------------------------------------------------------------------ records
def _records():
    d = os.path.join(STATE, "runs")
    recs = []  # type: list
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
    _write_json(
        os.path.join(ptt, "leader.json"),
        {"pid": os.getpid(), "sid": st["sid"], "pgid": st["pgid"], "start": st["start"]},
    )
    os.chdir(rec.get("cwd") or os.path.expanduser("~"))
    q = "'" + exit_file.replace("'", "'\\''") + "'"
    script = "%s\nrc=$?\necho $rc > %s\nexit $rc\n" % (rec["command"], q)
    if args.fifo:  # tmux: show the output in the pane and keep a copy in the console log
        lq = "'" + rec["log"].replace("'", "'\\''") + "'"
        script = "( %s\n) 2>&1 | tee -a %s\n" % (script, lq)
    import actions

    actions.default_signals()  # python's ignored SIGPIPE would outlive the exec
    os.execvpe("/bin/sh", ["/bin/sh", "-c", script], env)


# ------------------------------------------------------------------------------------ action lock
def cmd_lock(args):
    """Hold the pod's action lock (flock on <state>/action.lock) until stdin closes: the client's
    action ended, or its SSH session died (sshd closes the pipe), or our parent went away. The
    kernel drops a flock when its process dies, so a lock whose pid is dead is never in the way;
    the file only says who holds it, for the refusal message."""
    import select

    import podlock

    fd, info = podlock.take_lock(STATE, args.action, args.owner)
    if fd is None:
        out({"ok": False, "held_by": info})
        return 5
    out({"ok": True, "lock": info})
    parent, end = os.getppid(), time.time() + args.ttl
    try:
        while time.time() < end and os.getppid() == parent:
            ready, _, _ = select.select([sys.stdin], [], [], 1.0)
            if ready and not os.read(sys.stdin.fileno(), 4096):
                break
    finally:
        podlock.drop_lock(fd)
    return 0


# ------------------------------------------------------------------------------------ checkpoints
def orchestrator_root(run_dir, ckpt_dir):
    """Where this run's orchestrator checkpoint halves are, when the run has an orchestrator (prime-rl's
    ``rl``: its resolved configs name one, or a step dir holds an orchestrator/ half): the run dir's
    checkpoints/, also when the trainer's go to a separate ckpt output dir. None for an SFT run or an
    unknown run dir: each step_N is then judged alone."""
    if not run_dir:
        return None
    own = os.path.join(run_dir, "checkpoints")
    return own if has_orchestrator(run_dir, set((own, ckpt_dir))) else None


def list_ckpts(ckpt_dir, run_dir=None):
    """The step_N dirs of ckpt_dir; with the run dir known, "complete" needs both halves of an RL
    checkpoint wherever they live (see checkpoint_complete and orchestrator_root)."""
    found = []
    orch = orchestrator_root(run_dir, ckpt_dir)
    for step, p in _steps(ckpt_dir).items():
        try:
            mtime = os.stat(p).st_mtime
        except OSError:
            continue
        half = None if orch is None else os.path.join(orch, "step_%d" % step)
        found.append(
            {"step": step, "path": p, "complete": checkpoint_complete(p, half), "bytes": du(p), "mtime": mtime}
        )
    found.sort(key=lambda c: c["step"])
    return found


def cmd_ckpts(args):
    out({"ok": True, "ckpt_dir": args.ckpt_dir, "ckpts": list_ckpts(args.ckpt_dir, args.run_dir)})
    return 0


def cmd_delete(args):
    """Delete step dirs, re-checking here that each is complete and older than the N newest complete."""
    ckpts = list_ckpts(args.ckpt_dir, args.run_dir)
    complete = [c["step"] for c in ckpts if c["complete"]]
    keep = set(complete[-max(1, args.keep) :])
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


def _steps(d):
    """{step: path} of the step_N dirs in d; {} when d cannot be listed."""
    try:
        return step_dirs(d)
    except OSError:
        return {}


def orchestrator_dirs(run_dir, ckpt_dir):
    """With a separate ckpt output dir: the orchestrator's step dirs left under <run_dir>/checkpoints."""
    own = os.path.join(run_dir, "checkpoints")
    if os.path.realpath(own) == os.path.realpath(ckpt_dir):
        return []
    return [{"kind": "orchestrator", "step": s, "path": p, "bytes": du(p)} for s, p in sorted(_steps(own).items())]


def leftovers(run_dir, ckpt_dir, keep_broadcasts):
    """What prime-rl leaves behind (research prime-rl.md 6.3): with a separate ckpt output dir, the
    orchestrator's step dirs under <run_dir>/checkpoints are never pruned (one whose trainer part is
    gone and older than the newest complete checkpoint is an orphan); broadcasts/step_N copies of
    steps divisible by the ckpt interval are kept forever (all but the newest few are waste)."""
    found = []
    trainer = _steps(ckpt_dir)
    orch = orchestrator_root(run_dir, ckpt_dir)
    done = [
        s
        for s, p in trainer.items()
        if checkpoint_complete(p, None if orch is None else os.path.join(orch, "step_%d" % s))
    ]
    newest = max(done) if done else None
    for c in orchestrator_dirs(run_dir, ckpt_dir):
        if newest is not None and c["step"] < newest and c["step"] not in trainer:
            found.append(c)
    bc = sorted(_steps(os.path.join(run_dir, "broadcasts")).items())
    for step, path in bc[: max(0, len(bc) - max(1, keep_broadcasts))]:
        found.append({"kind": "broadcast", "step": step, "path": path, "bytes": du(path)})
    return found


def _pos_int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def run_prunes(run_dir):
    """prime-rl's own checkpoint pruning for the run, from its resolved configs: {"keep_last", "keep_interval"}
    (each an int or None) when the trainer's [ckpt] sets either (prime-rl then deletes old step_N dirs itself
    after each save), else None."""
    conf = os.path.join(run_dir, "configs")
    for name, path in (("trainer.json", ("ckpt",)), ("rl.json", ("trainer", "ckpt")), ("rl.json", ("ckpt",))):
        try:
            with open(os.path.join(conf, name)) as fh:
                node = json.load(fh)
        except (OSError, ValueError):
            continue
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        found = {k: _pos_int(node.get(k)) for k in ("keep_last", "keep_interval")}
        if found["keep_last"] is not None or found["keep_interval"] is not None:
            return found
    return None


def cmd_survey(args):
    """The checkpoints, the leftovers and the volume's use, in one exec (the cleanup daemon's round)."""
    disk = None
    path = args.ckpt_dir
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path or "/")
        total = st.f_blocks * st.f_frsize
        disk = {"used": total - st.f_bfree * st.f_frsize, "total": total, "path": path}
    except OSError:
        pass
    out(
        {
            "ok": True,
            "ckpt_dir": args.ckpt_dir,
            "ckpts": list_ckpts(args.ckpt_dir, args.run_dir),
            "disk": disk,
            "leftovers": leftovers(args.run_dir, args.ckpt_dir, args.keep_broadcasts),
            "orchestrator_dirs": orchestrator_dirs(args.run_dir, args.ckpt_dir),
            "prunes": run_prunes(args.run_dir),
        }
    )
    return 0


def cmd_prune(args):
    """Delete leftovers, re-checking here that each still is one."""
    still = {c["path"]: c for c in leftovers(args.run_dir, args.ckpt_dir, args.keep_broadcasts)}
    deleted, refused = [], []
    for path in args.paths:
        c = still.get(path)
        if c is None:
            refused.append({"path": path, "reason": "no longer a leftover"})
            continue
        size = du(path)
        try:
            shutil.rmtree(path)
            deleted.append(dict(c, bytes=size))
        except OSError as exc:
            refused.append({"path": path, "reason": str(exc)})
    out({"ok": True, "deleted": deleted, "refused": refused})
    return 0


def parser():
    import argparse

    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    p = sub.add_parser("status")
    p.add_argument("--run-id")
    p = sub.add_parser("child")
    p.add_argument("--record", required=True)
    p.add_argument("--fifo")
    p = sub.add_parser("ckpts")
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--run-dir", help="the run's dir: both halves of an RL checkpoint are then required")
    p = sub.add_parser("delete")
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--run-dir", help="as for ckpts")
    p.add_argument("--keep", type=int, required=True)
    p.add_argument("steps", type=int, nargs="*")
    p = sub.add_parser("lock")
    p.add_argument("--action", required=True)
    p.add_argument("--owner", default="")
    p.add_argument("--ttl", type=float, default=6 * 3600.0)
    for name in ("survey", "prune"):
        p = sub.add_parser(name)
        p.add_argument("--run-dir", required=True)
        p.add_argument("--ckpt-dir", required=True)
        p.add_argument("--keep-broadcasts", type=int, default=2)
        if name == "prune":
            p.add_argument("paths", nargs="*")
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
    p.add_argument("--login", action="append", help="NAME=why: a credential the config needs on the pod")
    sub.add_parser("launch", help="lock + pre-flight + config + start in one exec; a JSON request on stdin")
    sub.add_parser("kill", help="lock + SIGTERM, grace, SIGKILL + GPU check in one exec; a JSON request on stdin")
    return ap


def follow_configs(args):
    """With the default checkpoints dir (<run_dir>/checkpoints), the trainer half is where the run's
    resolved configs put it (a separate [ckpt] output_dir): the same place the probe and the backup
    agent look, so all three agree without a matching ckpt_subdir setting."""
    ckpt_dir, run_dir = getattr(args, "ckpt_dir", ""), getattr(args, "run_dir", None)
    if ckpt_dir and run_dir and os.path.normpath(ckpt_dir) == os.path.join(os.path.normpath(run_dir), "checkpoints"):
        args.ckpt_dir = trainer_ckpt_dir(run_dir)


def main(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    if a.cmd != "preflight":  # the pre-flight takes a dir relative to the run dir
        follow_configs(a)
    if a.cmd == "preflight":  # in a sibling file (uploaded with this one): this one stays readable
        import preflight

        return preflight.cmd_preflight(a, sys.modules[__name__]) or 0
    if a.cmd in ("launch", "kill"):  # in a sibling file, like the pre-flight
        import actions

        return getattr(actions, "cmd_" + a.cmd)(sys.modules[__name__]) or 0
    fn = {
        "status": cmd_status,
        "child": cmd_child,
        "ckpts": cmd_ckpts,
        "delete": cmd_delete,
        "lock": cmd_lock,
        "survey": cmd_survey,
        "prune": cmd_prune,
    }.get(a.cmd)
    if fn is None:
        ap.print_usage(sys.stderr)
        return 2
    return fn(a) or 0


if __name__ == "__main__":
    sys.exit(main())
