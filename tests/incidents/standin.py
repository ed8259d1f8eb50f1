"""A stand-in for prime-rl's ``rl`` launcher on a pod (standard library only), for the incident corpus.

``python3 standin.py @ CONFIG --output-dir RUN [--resume.step N] [--incident KIND --at-step N --hold S]``

It behaves as prime-rl does on disk and in its logs (src/prime_rl/entrypoints/rl.py, trainer/rl/train.py,
orchestrator/orchestrator.py, transports/weights/nccl.py, utils/pathing.py, utils/metrics_server.py):

- the launcher (process title ``PRIME-RL::Launcher``) makes ``logs/attempt_<n>`` and points ``logs/latest`` at
  it, writes the resolved configs ``configs/{rl,trainer,orchestrator,inference}.json`` (max_steps, the ckpt
  interval, the metrics server's port when ``[trainer.metrics_server]`` is set), starts inference, the
  orchestrator and the trainer (``PRIME-RL::Inference/Orchestrator/Trainer``: argv[0], so /proc/PID/cmdline
  shows the title), ends everything and exits 1 when the trainer or the orchestrator fails, and exits 0
  once both finished; SIGTERM: "Received SIGTERM, terminating all processes...", exit 1;
- every component logs in loguru's console format with the real local clock
  (``HH:MM:SS SUCCESS Step N | 1.0s | Loss ...``) into ``logs/latest/<component>.log``;
- the trainer appends one record per step to ``metrics.jsonl``, saves ``checkpoints/step_N`` every
  ``[ckpt] interval`` steps ("Saving checkpoint at step N"; DCP's order: shards first, ``.metadata`` last;
  then ``orchestrator/progress.pt``), and broadcasts each step's weights the NCCL way: it makes
  ``broadcasts/step_N``, touches ``STABLE`` and waits (logging at debug level only, i.e. nothing) for
  ``NCCL_READY``, which the orchestrator creates once the inference server took the update; at
  ``max_steps`` it logs "RL trainer finished!" and exits 0. With ``[trainer.metrics_server]`` it serves
  ``/metrics`` (trainer_step, trainer_last_step_timestamp_seconds) and ``/health`` on 127.0.0.1;
- inference serves ``/health`` on 127.0.0.1 (``[inference.server] port``) once loaded (``load_seconds``);
- the orchestrator logs its steps and a periodic pipeline record with ``event_loop_lag/*`` in metrics.jsonl.

Incidents (``--incident``), each at a known moment, recorded in ``<run>/.standin/onset.json``
({"incident", "onset": epoch seconds, "step"}):
  inference-dies    inference exits by SIGKILL once step ``--at-step`` is broadcast (its HTTP port goes away)
                    while the trainer and orchestrator keep waiting (an inference server that the launcher
                    does not watch: started apart, as with no ``[inference]`` block)
  broadcast-stall   the orchestrator never creates NCCL_READY for step ``--at-step`` (the trainer waits)
  trainer-hung      the trainer stops after step ``--at-step``; its metrics server still answers
  env-lag           from step ``--at-step`` the event-loop lag grows (~60 s per second)
  oom               the trainer dies at step ``--at-step`` with torch.OutOfMemoryError (the launcher ends all)
Normal operations, also timed in onset.json:
  long-save         the checkpoint at ``--at-step`` takes ``--hold`` seconds to write
  eval              evals at step ``--at-step`` hold training for ``--hold`` seconds
  slow-start        inference loads for ``--hold`` seconds before its /health answers
``--ckpt-kib`` sets a checkpoint's size (a disk filling up). ``.standin/`` holds the components' own plumbing
(the batch the trainer waits for), which prime-rl passes through its transports instead.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import tomllib

TITLES = {
    "launcher": "PRIME-RL::Launcher",
    "trainer": "PRIME-RL::Trainer",
    "orchestrator": "PRIME-RL::Orchestrator",
    "inference": "PRIME-RL::Inference",
}
PY_ENV = "PTT_STANDIN_PYTHON"  # the interpreter: argv[0] is the title, so sys.executable is not known


def log(fh, level, msg):
    fh.write("%s %7s %s\n" % (time.strftime("%H:%M:%S"), level, msg))
    fh.flush()


def fmt_time(seconds):
    return "%dms" % int(seconds * 1000) if seconds < 1 else "%.1fs" % seconds


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def onset(run, incident, step):
    path = os.path.join(run, ".standin", "onset.json")
    if not os.path.exists(path):
        write_json(path, {"incident": incident, "onset": time.time(), "step": step})


def wait_for(pred, interval=0.05, timeout=None):
    end = None if timeout is None else time.monotonic() + timeout
    while not pred():
        if end is not None and time.monotonic() > end:
            return False
        time.sleep(interval)
    return True


def http_ok(port, path="/health"):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=1.0) as r:
            return r.status == 200
    except OSError:
        return False


def serve(port, routes):
    """A small HTTP server on 127.0.0.1 in a thread: ``routes`` maps a path to a function giving (code, body)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            code, body = routes.get(self.path, lambda: (404, b""))()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def step_dirs(root):
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(int(n[5:]) for n in names if n.startswith("step_") and n[5:].isdigit())


# ------------------------------------------------------------------------------------------------ trainer
def trainer(a, cfg, run, logs):
    out = open(os.path.join(logs, "trainer.log"), "a")
    metrics = open(os.path.join(run, "metrics.jsonl"), "a")
    max_steps, interval = cfg["max_steps"], cfg["ckpt_interval"]
    state = {"step": 0, "at": time.time()}
    if cfg.get("metrics_port"):

        def prom():
            body = (
                "# TYPE trainer_step gauge\ntrainer_step %d\n# TYPE trainer_last_step_timestamp_seconds gauge\n"
                "trainer_last_step_timestamp_seconds %.3f\n" % (state["step"], state["at"])
            )
            return 200, body.encode()

        serve(cfg["metrics_port"], {"/metrics": prom, "/health": lambda: (200, b"ok\n")})
        log(out, "INFO", "Health server started at http://127.0.0.1:%d/health" % cfg["metrics_port"])
    first = (a.resume_step or 0) + 1
    if a.resume_step:
        log(out, "INFO", "Resuming from checkpoint step %d" % a.resume_step)
    log(out, "INFO", "Starting training loop (max_steps=%d)" % max_steps)
    ready = os.path.join(run, ".standin", "batch_ready")
    hold = os.path.join(run, ".standin", "hold_until")
    for step in range(first, max_steps + 1):
        t0 = time.time()
        wait_for(lambda: os.path.exists(ready), 0.2)  # the first batch: inference must be up
        wait_for(lambda: _hold_over(hold), 0.2)  # an eval holds the train batches back
        if a.incident == "oom" and step == a.at_step:
            onset(run, a.incident, step)
            out.write(
                "Traceback (most recent call last):\n"
                '  File "prime_rl/trainer/rl/train.py", line 412, in train\n'
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
                "capacity of 79.19 GiB of which 1.12 GiB is free.\n"
            )
            out.flush()
            return 1
        time.sleep(a.step_seconds)  # forward/backward
        bdir = os.path.join(run, "broadcasts", "step_%d" % step)
        os.makedirs(bdir, exist_ok=True)
        open(os.path.join(bdir, "STABLE"), "w").close()  # nccl.py: the orchestrator's watcher polls for it
        ready_marker = os.path.join(bdir, "NCCL_READY")
        wait_for(lambda: os.path.exists(ready_marker), 0.1)  # noqa: B023 - called at once; logged at debug only
        dt = time.time() - t0
        state["step"], state["at"] = step, time.time()
        log(
            out,
            "SUCCESS",
            "Step %d | %7s | Loss 0.%04d | Entropy 0.5123 | Mismatch KL 0.0011 | Grad. Norm 0.2100 | "
            "LR 3.00e-06 | Throughput 25000 tokens/s | MFU 31.0%% | Peak Mem. 41.3 GiB"
            % (step, fmt_time(dt), 5000 - step),
        )
        metrics.write(
            json.dumps(
                {
                    "step": step,
                    "time/step": round(dt, 4),
                    "loss/mean": 0.5 - step * 1e-4,
                    "perf/throughput": 25000.0,
                    "_timestamp": round(time.time(), 3),
                }
            )
            + "\n"
        )
        metrics.flush()
        if interval and (step % interval == 0 or step == max_steps):
            save = a.hold if a.incident == "long-save" and step == a.at_step else 0.0
            if save:
                onset(run, a.incident, step)
            log(out, "INFO", "Saving checkpoint at step %d" % step)
            write_checkpoint(run, step, save, a.ckpt_kib)
        if a.incident == "trainer-hung" and step == a.at_step:
            onset(run, a.incident, step)
            while True:  # a collective that never returns: the process and its HTTP thread live on
                time.sleep(3600)
    log(out, "SUCCESS", "RL trainer finished!")
    return 0


def _hold_over(path):
    try:
        with open(path) as f:
            return time.time() >= float(f.read() or 0)
    except (OSError, ValueError):
        return True


def write_checkpoint(run, step, seconds, kib):
    """DCP's order: the shards (spread over ``seconds``), then ``.metadata``; then the orchestrator's
    progress.pt (written to a temp name and renamed)."""
    d = os.path.join(run, "checkpoints", "step_%d" % step)
    os.makedirs(os.path.join(d, "trainer"), exist_ok=True)
    shards = 4
    for i in range(shards):
        with open(os.path.join(d, "trainer", "__%d_0.distcp" % i), "wb") as f:
            f.write(os.urandom(max(1, kib // shards) * 1024))
        time.sleep(seconds / shards)
    with open(os.path.join(d, "trainer", ".metadata"), "wb") as f:
        f.write(json.dumps({"step": step}).encode())
    os.makedirs(os.path.join(d, "orchestrator"), exist_ok=True)
    write_json(os.path.join(d, "orchestrator", "progress.pt.tmp2"), {"step": step})
    os.replace(os.path.join(d, "orchestrator", "progress.pt.tmp2"), os.path.join(d, "orchestrator", "progress.pt"))


# ------------------------------------------------------------------------------------------------ orchestrator
def orchestrator(a, cfg, run, logs):
    out = open(os.path.join(logs, "orchestrator.log"), "a")
    metrics = open(os.path.join(run, "metrics.jsonl"), "a")
    port = cfg["inference_port"]
    log(out, "INFO", "Waiting for inference pool to be ready at http://127.0.0.1:%d" % port)
    wait_for(lambda: http_ok(port), 0.2)
    log(out, "SUCCESS", "Inference pool ready")
    open(os.path.join(run, ".standin", "batch_ready"), "w").close()
    done = {s for s in step_dirs(os.path.join(run, "broadcasts")) if s <= (a.resume_step or 0)}
    lag_from, last_periodic = None, 0.0
    while True:
        now = time.time()
        if now - last_periodic >= 1.0:  # PeriodicLogger: the pipeline view with the event-loop lag
            last_periodic = now
            lag = 0.002 if lag_from is None else 0.002 + 60.0 * (now - lag_from)
            metrics.write(
                json.dumps(
                    {
                        "event_loop_lag/mean": round(lag * 0.6, 4),
                        "event_loop_lag/p99": round(lag, 4),
                        "event_loop_lag/max": round(lag, 4),
                        "event_loop_lag/n": 10.0,
                        "_timestamp": round(now, 3),
                    }
                )
                + "\n"
            )
            metrics.flush()
            log(out, "INFO", "Pipeline: train batch 0/128; 64 inflight episodes (train=64, eval=0)")
        for step in step_dirs(os.path.join(run, "broadcasts")):
            bdir = os.path.join(run, "broadcasts", "step_%d" % step)
            if step in done or not os.path.exists(os.path.join(bdir, "STABLE")):
                continue
            if a.incident == "broadcast-stall" and step >= a.at_step:
                onset(run, a.incident, step)
                continue  # the inference side never joins the collective: no NCCL_READY
            if not http_ok(port, "/update_weights"):
                continue  # inference is gone: the update cannot happen, retried
            open(os.path.join(bdir, "NCCL_READY"), "w").close()
            done.add(step)
            log(
                out,
                "SUCCESS",
                "Step %d | %7s | Reward 0.6000 | Trainable 120/128 (93.8%%) | Turns 1.0 | "
                "Max Off-Policy 1 | Error 0.0%% | Truncation 0.0%%" % (step, fmt_time(a.step_seconds)),
            )
            if a.incident == "env-lag" and step >= a.at_step and lag_from is None:
                lag_from = time.time()
                onset(run, a.incident, step)
            if a.incident == "eval" and step == a.at_step:
                onset(run, a.incident, step)
                log(out, "INFO", "Starting evals in gsm8k (128 total rollouts)")
                with open(os.path.join(run, ".standin", "hold_until"), "w") as f:
                    f.write(str(time.time() + a.hold))
                time.sleep(a.hold)
                # prime-rl's orchestrator.finalize_eval_batch
                log(
                    out,
                    "SUCCESS",
                    "Evaluated gsm8k (Step %d) | Policy v%d | %7s | Reward 0.6100 | Turns 1.0 | "
                    "Branches 1.0 | Error 0.0%% | Truncation 0.0%%" % (step, step, fmt_time(a.hold)),
                )
                metrics.write(json.dumps({"eval/gsm8k/avg@1": 0.61, "step": step}) + "\n")
                metrics.flush()
            if step >= cfg["max_steps"]:
                log(out, "SUCCESS", "Orchestrator finished.")
                return 0
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------------ inference
def inference(a, cfg, run, logs):
    out = open(os.path.join(logs, "inference.log"), "a")
    log(out, "INFO", "Loading model weights")
    if a.incident == "slow-start":
        onset(run, a.incident, 0)
        time.sleep(a.hold)
    serve(
        cfg["inference_port"],
        {"/health": lambda: (200, b""), "/liveness": lambda: (200, b""), "/update_weights": lambda: (200, b"")},
    )
    out.write("INFO:     Application startup complete.\n")
    out.flush()
    while True:
        time.sleep(0.1)
        if a.incident == "inference-dies" and any(s >= a.at_step for s in step_dirs(os.path.join(run, "broadcasts"))):
            onset(run, a.incident, a.at_step)
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer ends it: no last word in its log


# ------------------------------------------------------------------------------------------------ launcher
def resolved(config_path, run):
    with open(config_path, "rb") as f:
        cfg = tomllib.load(f)
    trainer_cfg = cfg.get("trainer", {})
    ms = trainer_cfg.get("metrics_server")
    inf = cfg.get("inference", {}).get("server", {})
    return {
        "max_steps": int(cfg.get("max_steps", 10)),
        "ckpt_interval": int(cfg.get("ckpt", {}).get("interval", 0)),
        "metrics_port": int(ms.get("port", 8000)) if isinstance(ms, dict) else None,
        "inference_port": int(inf.get("port", 8000)),
        "output_dir": run,
    }


def attempt_dir(run):
    """utils/pathing.py's create_attempt_log_dir: logs/attempt_<n+1>, logs/latest repointed atomically."""
    logs = os.path.join(run, "logs")
    os.makedirs(logs, exist_ok=True)
    n = 1 + max([int(p[8:]) for p in os.listdir(logs) if p.startswith("attempt_") and p[8:].isdigit()], default=0)
    d = os.path.join(logs, "attempt_%d" % n)
    os.mkdir(d)
    tmp = os.path.join(logs, ".attempt_%d" % n)
    os.symlink("attempt_%d" % n, tmp)
    os.replace(tmp, os.path.join(logs, "latest"))
    return d


def launcher(a, argv):
    run = os.path.abspath(a.output_dir)
    os.makedirs(os.path.join(run, ".standin"), exist_ok=True)
    for name in ("batch_ready", "hold_until"):  # a resume starts its pipeline afresh
        try:
            os.unlink(os.path.join(run, ".standin", name))
        except FileNotFoundError:
            pass
    cfg = resolved(a.config, run)
    cdir = os.path.join(run, "configs")
    os.makedirs(cdir, exist_ok=True)
    trainer_json = {"max_steps": cfg["max_steps"], "ckpt": {"interval": cfg["ckpt_interval"]}, "output_dir": run}
    if cfg["metrics_port"]:
        trainer_json["metrics_server"] = {"port": cfg["metrics_port"], "host": "127.0.0.1"}
    write_json(os.path.join(cdir, "rl.json"), {"max_steps": cfg["max_steps"], "output_dir": run})
    write_json(os.path.join(cdir, "trainer.json"), trainer_json)
    write_json(os.path.join(cdir, "orchestrator.json"), {"max_steps": cfg["max_steps"], "output_dir": run})
    write_json(os.path.join(cdir, "inference.json"), {"server": {"port": cfg["inference_port"]}})
    write_json(os.path.join(run, ".standin", "resolved.json"), cfg)
    attempt_dir(run)
    out = sys.stdout
    log(out, "INFO", "Starting RL run")
    py = os.environ[PY_ENV]
    procs = {}
    for role in ("inference", "orchestrator", "trainer"):
        log(out, "INFO", "Starting %s process" % role)
        procs[role] = subprocess.Popen(
            [TITLES[role], os.path.abspath(__file__), *argv, "--role", role],
            executable=py,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    watched = ("orchestrator", "trainer") if a.incident == "inference-dies" else tuple(procs)

    def stop_all():
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()

    def on_term(signum, frame):
        log(out, "WARNING", "Received SIGTERM, terminating all processes...")
        stop_all()
        sys.exit(1)

    signal.signal(signal.SIGTERM, on_term)
    log(out, "SUCCESS", "Startup complete. Showing orchestrator logs...")
    while not all(procs[r].poll() is not None for r in ("orchestrator", "trainer")):
        failed = [r for r in watched if procs[r].poll() not in (None, 0)]
        if failed:
            code = procs[failed[0]].returncode
            log(out, "ERROR", "Error: %s failed with exit code %d" % (failed[0].capitalize(), code))
            log(out, "ERROR", "Terminating all processes...")
            stop_all()
            return 1
        time.sleep(0.2)
    log(out, "SUCCESS", "Training finished!")
    stop_all()
    return 0


def _title():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode()
    except OSError:
        return TITLES["launcher"]  # no /proc: run under the plain name


def main():
    ap = argparse.ArgumentParser(prog="rl")
    ap.add_argument("at", choices=["@"])
    ap.add_argument("config")
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--resume.step", dest="resume_step", type=int)
    ap.add_argument("--incident", default="")
    ap.add_argument("--at-step", type=int, default=3)
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--step-seconds", type=float, default=1.0)
    ap.add_argument("--ckpt-kib", type=int, default=64)
    ap.add_argument("--role", default="launcher", choices=list(TITLES))
    argv = sys.argv[1:]
    a = ap.parse_args(argv)
    if a.role == "launcher" and _title() != TITLES["launcher"]:
        os.environ[PY_ENV] = sys.executable  # re-exec under the launcher's title, same pid
        os.execv(sys.executable, [TITLES["launcher"], os.path.abspath(__file__), *argv])
    if a.role == "launcher":
        return launcher(a, argv)
    run = os.path.abspath(a.output_dir)
    with open(os.path.join(run, ".standin", "resolved.json")) as f:
        cfg = json.load(f)
    logs = os.path.join(run, "logs", "latest")
    return {"trainer": trainer, "orchestrator": orchestrator, "inference": inference}[a.role](a, cfg, run, logs)


if __name__ == "__main__":
    sys.exit(main())
