"""Pod-side pre-flight checks of the lifecycle helper (stdlib only, Python 3.6+).

Uploaded next to ``lifecycle.py`` (same directory, one content hash for both) and imported by it
for ``preflight``; ``agent`` is the helper module (records, checkpoint listing, output).
"""

import json
import os
import shutil
import subprocess
import sys


def cmd_preflight(args, agent):
    checks, info = run_checks(args, agent)
    agent.out(dict(info, ok=True, checks=checks))
    return 0


def _spawn(argv, **kw):
    """A check's process, started now and collected later: the slow ones (nvidia-smi, the CUDA
    context) run side by side instead of one after the other."""
    try:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw
        ), None
    except OSError as exc:
        return None, exc


def _collect(started, timeout):
    """(returncode, stdout, stderr) of a _spawn, or raises what starting or waiting raised."""
    proc, exc = started
    if proc is None:
        raise exc
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out, err


def run_checks(args, agent, on_check=None):
    """The checks in order, each passed to ``on_check`` as soon as it is decided (``launch`` streams
    them); returns (checks, {"run_dir", "home", "nofile"})."""
    import resource

    list_ckpts, _records, _alive = agent.list_ckpts, agent._records, agent._alive
    checks = []

    def add(name, status, detail, fix="", **extra):
        checks.append(dict({"name": name, "status": status, "detail": detail, "fix": fix}, **extra))
        if on_check is not None:
            on_check(checks[-1])

    smi = shutil.which("nvidia-smi")
    smi_run = _spawn([smi, "-L"]) if smi else None
    apps_run = (
        _spawn([smi, "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]) if smi else None
    )
    cuda_run = None
    if args.cuda:
        code = (
            "import importlib.util,sys\n"
            "if importlib.util.find_spec('torch') is None: print('NOTORCH'); sys.exit(0)\n"
            "import torch\n"
            "print('OK %d' % torch.cuda.device_count() if torch.cuda.is_available() and "
            "torch.zeros(1).cuda() is not None else 'NOCUDA')\n"
        )
        cuda_run = _spawn([args.python or sys.executable, "-c", code])

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    want = args.min_nofile
    if soft == inf or soft >= want:
        add("ulimit -n", "ok", "open files %s" % ("unlimited" if soft == inf else soft))
    elif hard == inf or hard >= want:
        add(
            "ulimit -n",
            "ok",
            "open files %d, raised to %d for the run (hard limit %s)"
            % (soft, want, "unlimited" if hard == inf else hard),
        )
    else:
        add(
            "ulimit -n",
            "fail",
            "open files %d, hard limit %d < %d" % (soft, hard, want),
            "raise the hard limit: add '* hard nofile %d' to /etc/security/limits.conf (or the container's "
            "--ulimit nofile=%d:%d) and reconnect" % (want, want, want),
        )

    if not smi:
        add(
            "GPUs visible",
            "fail",
            "nvidia-smi not found",
            "install the NVIDIA driver / use a GPU image; check `nvidia-smi` works on the pod",
        )
    else:
        try:
            rc, sout, serr = _collect(smi_run, 30)
            gpus = [ln for ln in sout.decode("utf-8", "replace").splitlines() if ln.startswith("GPU ")]
            if rc == 0 and gpus:
                add("GPUs visible", "ok", "%d GPU(s): %s" % (len(gpus), gpus[0].split("(")[0].strip()))
            else:
                err = (serr or sout).decode("utf-8", "replace").strip().splitlines()
                add(
                    "GPUs visible",
                    "fail",
                    "nvidia-smi -L: %s" % (err[0] if err else "no GPUs"),
                    "check the driver (`nvidia-smi`), CUDA_VISIBLE_DEVICES and the container's --gpus",
                )
        except (OSError, subprocess.TimeoutExpired) as exc:
            add("GPUs visible", "fail", "nvidia-smi: %s" % exc, "check the driver with `nvidia-smi`")

    if args.cuda:
        try:
            rc, sout, serr = _collect(cuda_run, 120)
            res = sout.decode("utf-8", "replace").strip()
            if res.startswith("NOTORCH"):
                add(
                    "CUDA context",
                    "skip",
                    "torch is not importable by %s" % (args.python or "python3"),
                    "activate the training venv (e.g. `uv sync`) to have this checked",
                )
            elif res.startswith("OK"):
                add("CUDA context", "ok", "torch sees %s GPU(s)" % res.split()[1])
            else:
                tail = serr.decode("utf-8", "replace").strip().splitlines()
                add(
                    "CUDA context",
                    "fail",
                    "torch cannot create a CUDA context: %s" % (tail[-1] if tail else res),
                    "check the driver/CUDA versions match torch's build (`python -c 'import torch; "
                    "print(torch.version.cuda)'`)",
                )
        except (OSError, subprocess.TimeoutExpired) as exc:
            add("CUDA context", "fail", str(exc), "check that python3 and torch start on the pod")

    args.run_dir = os.path.abspath(os.path.expanduser(args.run_dir))
    per = args.ckpt_bytes
    if not per and args.ckpt_dir:
        ckdir = args.ckpt_dir if os.path.isabs(args.ckpt_dir) else os.path.join(args.run_dir, args.ckpt_dir)
        done = [c for c in list_ckpts(ckdir, args.run_dir) if c["complete"]]
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
            add("free disk", "ok", "%s free on %s, %s needed" % (_gib(free), path, _gib(need)), free=free, total=total)
        else:
            add(
                "free disk",
                "fail",
                "%s free on %s, %s needed for the expected checkpoints" % (_gib(free), path, _gib(need)),
                "free space (delete old checkpoints), pick a bigger volume, or lower [lifecycle] expected_ckpts",
                act="cleanup",
                free=free,
                total=total,
            )
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
        fix = (
            "install uv: curl -LsSf https://astral.sh/uv/install.sh | sh, then `uv sync` in prime-rl"
            if exe == "uv"
            else "install %s on the pod or fix [lifecycle] command" % exe
        )
        add("trainer command", "fail", "%s not found on PATH" % exe, fix)

    active = [r for r in _records() if _alive(r)]
    if active:
        r = active[0]
        add(
            "no other run active",
            "fail",
            "run %s is active in %s (pid %s)" % (r.get("id"), r.get("run_dir"), r.get("pid")),
            "kill it first",
            act="kill",
        )
    else:
        procs = _gpu_apps(apps_run)  # a run started by hand (or by another tool) holds the GPUs too
        ours = cuda_run[0].pid if cuda_run is not None and cuda_run[0] is not None else None
        if procs and ours is not None:  # the CUDA check runs side by side: its own context is not a run
            procs = [p for p in procs if p[0] != str(ours)]
        if procs:
            add(
                "no other run active",
                "fail",
                "%d process(es) on the GPUs not started by prime-train-tui: %s"
                % (len(procs), ", ".join("pid %s (%s)" % (pid, what) for pid, what in procs[:8])),
                "stop them first (`kill %s` on the pod; see `nvidia-smi`), or start anyway"
                % " ".join(pid for pid, _ in procs[:8]),
                act="force",
            )
        else:
            add(
                "no other run active",
                "ok",
                "no run of ours is active" + (", no process on the GPUs" if procs is not None else ""),
            )

    for spec in getattr(args, "login", None) or []:
        name, _, why = spec.partition("=")
        where = _logged_in(name)
        if where:
            add("%s on the pod" % name, "ok", where)
        else:
            add(
                "%s on the pod" % name,
                "warn",
                "%s, and the pod has no %s: the run fails at its first use" % (why or "the config needs it", name),
                "list %s in [lifecycle] secrets in settings (it is sent from this machine), or log in on "
                "the pod (%s)" % (name, "wandb login" if name == "WANDB_API_KEY" else "huggingface-cli login"),
            )

    for spec in args.check or []:
        c = json.loads(spec)
        try:
            p = subprocess.run(
                ["/bin/sh", "-c", c["run"]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=float(c.get("timeout") or 30),
                cwd=args.run_dir if os.path.isdir(args.run_dir) else None,
            )
            text = p.stdout.decode("utf-8", "replace").strip().splitlines()
            if p.returncode == 0:
                add(c["name"], "ok", text[-1][:200] if text else "passed")
            else:
                add(
                    c["name"],
                    "fail",
                    (text[-1][:200] if text else "exit %d" % p.returncode),
                    c.get("fix") or "see `%s`" % c["run"],
                )
        except subprocess.TimeoutExpired:
            add(c["name"], "fail", "timed out", c.get("fix") or "")
    return checks, {
        "run_dir": args.run_dir,
        "home": os.path.expanduser("~"),
        "nofile": [None if soft == inf else soft, None if hard == inf else hard],
    }


def _logged_in(name):
    """Where the pod has credential ``name`` (its environment, or the file its library reads), or ""."""
    home = os.path.expanduser("~")
    if os.environ.get(name):
        return "%s is in the pod's environment" % name
    if name == "WANDB_API_KEY":
        netrc = os.path.join(home, ".netrc")
        try:
            with open(netrc, encoding="utf-8", errors="replace") as f:
                if "api.wandb.ai" in f.read(1 << 20):
                    return "~/.netrc has a W&B login (api.wandb.ai)"
        except OSError:
            pass
    if name == "HF_TOKEN":
        if os.environ.get("HUGGING_FACE_HUB_TOKEN"):
            return "HUGGING_FACE_HUB_TOKEN is in the pod's environment"
        hf_home = os.environ.get("HF_HOME") or os.path.join(home, ".cache", "huggingface")
        token = os.path.join(hf_home, "token")
        try:
            if os.path.getsize(token) > 0:
                return "the pod is logged in to Hugging Face (%s)" % token.replace(home, "~", 1)
        except OSError:
            pass
    return ""


def _gpu_apps(started):
    """[(pid, "name, memory")] of nvidia-smi's compute processes; None when unknown (no nvidia-smi, an
    error): this part of the check never fails on a guess. (A container may not see the host's pids.)"""
    if started is None:
        return None
    try:
        rc, sout, _ = _collect(started, 30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if rc != 0:
        return None
    procs = []
    for line in sout.decode("utf-8", "replace").splitlines():
        parts = [x.strip() for x in line.split(",")]
        if parts and parts[0].isdigit():
            procs.append((parts[0], ", ".join(x for x in parts[1:] if x) or "?"))
    return procs


def _gib(n):
    return "%.1f GiB" % (n / 2.0**30)
