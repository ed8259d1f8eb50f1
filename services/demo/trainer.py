"""A simulated prime-rl-like trainer (stdlib only; runnable by path or as ``python -m services.demo.trainer``).

Writes, under --run-dir:
  logs/trainer.log, logs/orchestrator.log   prime-rl (loguru) style lines, e.g.
      "14:00:02 SUCCESS Step 1 |    2.0s | Loss 0.4961 | Entropy 0.6123 | ... | Peak Mem. 41.3 GiB"
  metrics.jsonl                              one {"step","time",...} object per step (trainer keys,
                                             incl. time/{step,wait_for_batch,load_data,forward_backward,
                                             broadcast_weights,save_ckpt}); with --profile also the
                                             orchestrator's record (time/step, time/wait_for_policy, rollout
                                             timing in the current layout, see --profile) and a
                                             periodic inference/agg/* record, as prime-rl's file monitor does
  checkpoints/step_N/{trainer/model.bin,trainer/.metadata,orchestrator/progress.pt}
                                             every --ckpt-interval steps and at the last step, in DCP's order
                                             (.metadata last)
  configs/trainer.json                       {"max_steps": N} when --max-steps > 0, as prime-rl's resolved
                                             config (the probe reads it: step N/max, ETA)
With --runbook it is not prime-rl but a plain script: training.csv (step,loss,lr,toks_per_s), plain
"step N loss L" lines in logs/trainer.log, no metrics.jsonl and no checkpoints.
Everything but the wall-clock pacing is deterministic given --seed: the HH:MM:SS stamps come from a
simulated clock (14:00:00 + step * step_seconds). --max-steps 0 runs until killed.

--resume-step N continues a run from its complete checkpoint step_N (exit 1 when there is none): steps
N+1.. are appended to the logs and metrics.jsonl, as prime-rl's --resume.step does. --head-start N writes
a fresh run's first N steps at once (a run that has been going for a while), then paces the rest.
On SIGTERM (a kill) the trainer says so in logs/trainer.log and exits 143; with --torn-save it also leaves
the checkpoint it was saving, step_{last+1}, half-written (trainer/model.bin without .metadata, no
orchestrator half, dated an hour back: abandoned, not being written), as a run killed mid-save does (the
demo pod's runs do). --owner-file names a JSON file {"pid", "start"}: once the
process it names has ended (the app that owns the demo was closed or killed), the run stops by itself within
a step, as it does when that file goes away (released, or deleted with the sandbox); without the file at start
the run has no owner. --config is only named in the log (the demo reads nothing from it).

--profile latency-bound | generation-bound | trainer-bound | checkpoint-heavy (or latency | throughput |
trainer) gives the steps the timing of that kind of run (simulated seconds, independent of the wall pacing
--step-seconds), so the bottleneck breakdown has something real to find: the orchestrator's records carry
prime-rl's current rollout timing layout (train/{agg|reverse-text}/{all|effective}/solver/timing/
{setup,agent,agent/model,agent/harness,finalize,scoring,total}/{mean,max}) and a periodic record carries
the inference server's gauges (inference/agg/{kv_cache_usage_perc,num_requests_running,
num_requests_waiting}/{mean,min,max}). Each step (with a profile or not) appends its episodes to
rollouts/step_N/train/all/traces.jsonl in prime-rl's current layout (one verifiers Episode record per line:
two envs (one with a profile: its timing metrics name that one), rewards with their parts, tool calls, now
and then a failed tool or a truncated episode; each
trace with its timing spans; the latency-bound profile has a slow tail of tool time: about one episode in
16 stuck ~9x longer in its tools); only the newest 4 step dirs are kept, to stay small.
Without --profile, $PTT_DEMO_PROFILE names it; a file
<run dir>/demo-profile holding a profile name switches a running demo at its next step
(`echo latency > run/demo-profile`). --no-metrics leaves metrics.jsonl out (console only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import sys
import time

BASE_CLOCK = 14 * 3600


def fmt_time(seconds):
    """prime-rl's format_time: <1s -> '123ms', <60s -> '12.3s', then '2m 5s', '1h 3m'."""
    if seconds < 1:
        return "%dms" % int(seconds * 1000)
    if seconds < 60:
        return "%.1fs" % seconds
    if seconds < 3600:
        return "%dm %ds" % (seconds // 60, seconds % 60)
    return "%dh %dm" % (seconds // 3600, (seconds % 3600) // 60)


def stamp(sim_seconds):
    s = int(BASE_CLOCK + sim_seconds) % 86400
    return "%02d:%02d:%02d" % (s // 3600, (s % 3600) // 60, s % 60)


def line(sim_seconds, level, msg):
    return "%s %7s %s\n" % (stamp(sim_seconds), level, msg)


def step_values(seed, step, step_seconds):
    r = random.Random("%s:trainer:%d" % (seed, step))
    return {
        "time/step": step_seconds * r.uniform(0.95, 1.05),
        "loss/mean": 0.5 * math.exp(-step / 200.0) + r.uniform(0.0, 0.02),
        "entropy/all/mean": 0.6 * math.exp(-step / 400.0) + r.uniform(0.0, 0.05),
        "mismatch_kl/all/mean": r.uniform(0.0005, 0.002),
        "optim/grad_norm": r.uniform(0.1, 0.4),
        "optim/lr": 3e-6,
        "perf/throughput": r.uniform(24000, 26500),
        "perf/mfu": r.uniform(29.0, 33.0),
        "perf/peak_memory": r.uniform(41.0, 42.0),
        "orch/reward": min(1.0, 0.2 + step / 300.0 + r.uniform(-0.03, 0.03)),
        "orch/trainable": r.randint(88, 128),
        "orch/truncation": r.uniform(0.0, 4.0),
    }


# Nominal simulated seconds per step: trainer parts, per-rollout generation/tool time, the orchestrator's
# hold time, and the cost of one checkpoint save.
# kv/running/waiting: the inference server's load (vLLM's kv_cache_usage_perc, num_requests_*).
PROFILES = {
    "latency-bound": dict(
        wait=30.0,
        load=0.4,
        fb=6.0,
        bcast=1.5,
        gen=2.0,
        tools=14.0,
        hold=0.2,
        save=4.0,
        kv=0.03,
        running=2.0,
        waiting=0.0,
    ),
    "generation-bound": dict(
        wait=26.0,
        load=0.4,
        fb=6.0,
        bcast=1.5,
        gen=20.0,
        tools=0.3,
        hold=0.2,
        save=4.0,
        kv=0.95,
        running=220.0,
        waiting=30.0,
    ),
    "trainer-bound": dict(
        wait=0.5,
        load=0.4,
        fb=30.0,
        bcast=2.0,
        gen=3.0,
        tools=0.2,
        hold=22.0,
        save=4.0,
        kv=0.35,
        running=40.0,
        waiting=0.0,
    ),
    "checkpoint-heavy": dict(
        wait=4.0,
        load=0.4,
        fb=6.0,
        bcast=1.5,
        gen=3.0,
        tools=0.5,
        hold=0.5,
        save=160.0,
        kv=0.3,
        running=30.0,
        waiting=0.0,
    ),
}
# the three diagnoses by the names the demo's users switch between
ALIASES = {"latency": "latency-bound", "throughput": "generation-bound", "trainer": "trainer-bound"}
PROFILE_NAMES = ("default",) + tuple(PROFILES) + tuple(ALIASES)
PROFILE_FILE = "demo-profile"  # in the run dir: one profile name; read every step (switches a running demo)
PROFILE_ENV = "PTT_DEMO_PROFILE"  # the profile when --profile is not given
DEMO_ENV, DEMO_AGENT = "reverse-text", "solver"
SETUP, FINALIZE, SCORING = 0.2, 0.05, 0.1


def switched_profile(run_dir, current):
    """The profile named in <run_dir>/demo-profile, else ``current`` (an unknown name changes nothing)."""
    try:
        with open(os.path.join(run_dir, PROFILE_FILE)) as fh:
            name = fh.read(64).strip()
    except (OSError, UnicodeDecodeError):
        return current
    return name if name in PROFILE_NAMES else current


def rollout_timing(gen, tools, r):
    """prime-rl's per-rollout phase timing of one step, in its current key layout
    (train/{agg|<env>}/{all|effective}/<agent>/timing/<phase>/<stat>)."""
    agent = gen + tools
    phases = {
        "setup": SETUP,
        "agent": agent,
        "agent/model": gen,
        "agent/harness": tools,
        "finalize": FINALIZE,
        "scoring": SCORING,
        "total": SETUP + agent + FINALIZE + SCORING,
    }
    out = {}
    for scope in ("agg", DEMO_ENV):
        for subset in ("all", "effective"):
            for phase, v in phases.items():
                base = "train/%s/%s/%s/timing/%s" % (scope, subset, DEMO_AGENT, phase)
                out[base + "/mean"] = v
                out[base + "/max"] = v * r.uniform(1.5, 2.5)
    return out


EPISODES_PER_STEP = 16  # episodes written to traces.jsonl per step (prime-rl writes every rollout)
TRACE_STEPS_KEPT = 4  # rollouts/step_N dirs kept (prime-rl keeps them all; the demo stays small)
EPOCH = 1.78e9  # the simulated clock's epoch seconds for the trace timestamps


def episode_seconds(profile, p, r, n):
    """(tool, model) seconds of ``n`` episodes around the profile's per-rollout means; latency-bound has a
    slow tail (one episode in 16 stuck ~9x longer in its tools, the mean kept)."""
    slow = r.randrange(n) if profile == "latency-bound" else None
    base = p["tools"] / (1.0 + 8.0 / 16.0) if slow is not None else p["tools"]
    out = []
    for i in range(n):
        tool = base * r.uniform(0.85, 1.15) * (9.0 if i == slow else 1.0)
        out.append((tool, p["gen"] * r.uniform(0.8, 1.2)))
    return out


WORDS = ("alpha", "river", "copper", "lantern", "orbit", "meadow", "signal", "harbor", "quartz", "ember")
SEARCH_ENV = "wiki-search"  # the demo's second env: a tool-using one
DEFAULT_EPISODE = dict(gen=2.0, tools=1.2)  # per-rollout seconds of the default run's episodes


def _node(parent, message, sampled, ts, r):
    """One verifiers MessageNode as serialized: the message, its provenance and its tokens (ids only)."""
    n = r.randint(8, 40) if sampled else r.randint(4, 20)
    return {
        "parent": parent,
        "message": message,
        "sampled": sampled,
        "timestamp": round(ts, 3),
        "token_ids": [r.randrange(50000) for _ in range(n)],
        "mask": [sampled] * n,
        "is_content": [],
        "logprobs": [round(-r.random(), 4) for _ in range(n)] if sampled else [],
        "advantages": None,
        "reference_logprobs": None,
    }


def _conversation(searching, step, i, r, t0, model):
    """(nodes, calls, rewards, stop, errors, truncated) of one episode: reverse-text is one turn; wiki-search
    calls its search tool one to three times, which now and then fails; one episode in ~10 runs out of turns."""
    words = [r.choice(WORDS) for _ in range(r.randint(3, 6))]
    text = " ".join(words)
    system = {"role": "system", "content": "You are a careful assistant. Answer inside <answer> tags."}
    nodes, calls, errors = [], [], []  # type: list, list, list
    ts = t0
    if not searching:
        prompt = "Reverse the text character by character: %s" % text
        nodes.append(_node(None, system, False, ts, r))
        nodes.append(_node(0, {"role": "user", "content": prompt}, False, ts, r))
        good = r.random() < 0.35 + min(0.5, step / 200.0)
        answer = text[::-1] if good else text[::-1][: -r.randint(1, 4)]
        ts += model
        nodes.append(
            _node(
                1,
                {
                    "role": "assistant",
                    "content": "<answer>%s</answer>" % answer,
                    "reasoning_content": "Reading the %d characters from the end: " % len(text)
                    + " ".join(w[::-1] for w in reversed(words)),
                },
                True,
                ts,
                r,
            )
        )
        calls.append(
            {
                "node": 2,
                "model": "demo-policy",
                "finish_reason": "stop",
                "endpoint": "/chat/completions",
                "usage": {"prompt_tokens": 60 + len(prompt) // 4, "completion_tokens": 20 + len(text) // 2},
                "time": {"start": round(t0, 3), "end": round(ts, 3)},
            }
        )
        lcs = sum(1 for x, y in zip(answer, text[::-1]) if x == y) / float(len(text))
        rewards = {"lcs_ratio": {"score": round(lcs, 4), "weight": 1.0}, "format": {"score": 1.0, "weight": 0.2}}
        return nodes, calls, rewards, "done", errors, False
    question = "Which article mentions %s and %s first?" % (words[0], words[1])
    nodes.append(
        _node(None, {"role": "system", "content": "Use the search tool; answer with the title."}, False, ts, r)
    )
    nodes.append(_node(0, {"role": "user", "content": question}, False, ts, r))
    searches = r.randint(1, 3)
    out_of_turns = r.random() < 0.1
    failed = False
    for k in range(searches if not out_of_turns else 4):
        ts += model / (searches + 1)
        args = json.dumps({"query": " ".join(r.sample(words, 2)), "limit": 5})
        call_id = "call_%d_%d_%d" % (step, i, k)
        nodes.append(
            _node(
                len(nodes) - 1,
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": call_id, "name": "search", "arguments": args}],
                },
                True,
                ts,
                r,
            )
        )
        calls.append(
            {
                "node": len(nodes) - 1,
                "model": "demo-policy",
                "finish_reason": "tool_calls",
                "usage": {"prompt_tokens": 120 + 80 * k, "completion_tokens": 24},
            }
        )
        if r.random() < 0.08:
            failed = True
            result = "error: search backend timed out after 30 s"
            errors.append({"type": "ToolError", "message": "search timed out after 30 s (query %s)" % args})
        else:
            result = "\n".join(
                "%d. %s %s — %s"
                % (j + 1, r.choice(WORDS).title(), r.choice(WORDS), " ".join(r.choice(WORDS) for _ in range(12)))
                for j in range(5)
            )
        nodes.append(
            _node(
                len(nodes) - 1,
                {"role": "tool", "tool_call_id": call_id, "name": "search", "content": result},
                False,
                ts,
                r,
            )
        )
    if out_of_turns:
        return nodes, calls, {"correct": {"score": 0.0, "weight": 1.0}}, "max_turns", errors, True
    ts += model / (searches + 1)
    right = not failed and r.random() < 0.45 + min(0.4, step / 250.0)
    title = words[0].title() if right else r.choice(WORDS).title()
    nodes.append(_node(len(nodes) - 1, {"role": "assistant", "content": "<answer>%s</answer>" % title}, True, ts, r))
    calls.append(
        {
            "node": len(nodes) - 1,
            "model": "demo-policy",
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 140 + 80 * searches, "completion_tokens": 12},
        }
    )
    rewards = {
        "correct": {"score": 1.0 if right else 0.0, "weight": 1.0},
        "tool_use": {"score": round(1.0 / searches, 3), "weight": 0.1},
    }
    return nodes, calls, rewards, "done", errors, False


def trace_record(step, i, tool, model, t0, r=None, envs=2):
    """One episode as verifiers' Episode.to_record() writes it (prime-rl's layout; the timing spans last in
    each trace, as serialized): rewards and their parts, tool calls, errors and truncations; every third
    episode searches with a tool, in an env of its own when ``envs`` is 2."""
    r = r or random.Random("%d:%d" % (step, i))
    searching = i % 3 == 2
    env = SEARCH_ENV if searching and envs == 2 else DEMO_ENV
    agent_end = t0 + SETUP + model + tool
    timing = {
        "start": t0,
        "boot": {"start": t0, "end": t0},
        "setup": {"start": t0, "end": t0 + SETUP},
        "agent": {
            "start": t0 + SETUP,
            "end": agent_end,
            "model": {"duration": round(model, 6)},
            "harness": {"duration": round(tool, 6)},
        },
        "finalize": {"start": agent_end, "end": agent_end + FINALIZE},
        "scoring": {"start": agent_end + FINALIZE, "end": agent_end + FINALIZE + SCORING},
    }
    nodes, calls, rewards, stop, errors, _cut = _conversation(searching, step, i, r, t0 + SETUP, model)
    task = {"type": "Task", "data": {"prompt": content_of(nodes[1]), "example": "%d-%d" % (step, i)}}
    tools = (
        [{"name": "search", "description": "Search the wiki", "parameters": {"type": "object"}}] if searching else []
    )
    trace = {
        "version": 1,
        "id": "t%d-%d" % (step, i),
        "verifiers": {"version": "demo"},
        "task": task,
        "agent": {"config": {}, "name": DEMO_AGENT, "trainable": True},
        "tools": tools,
        "nodes": nodes,
        "calls": calls,
        "request_rewrites": [],
        "response_rewrites": [],
        "rewards": rewards,
        "metrics": {"num_turns": float(sum(1 for n in nodes if n["sampled"]))},
        "info": {},
        "extra_usage": [],
        "is_completed": True,
        "ok": not errors,
        "stop_condition": stop,
        "errors": errors,
        "timing": timing,
    }
    return {
        "id": "e%d-%d" % (step, i),
        "env": {"id": env, "name": env},
        "task": task,
        "group": {"id": "g%d-%d" % (step, i // 4)},
        "run": {"type": "train", "id": "demo", "work": {"type": "train", "step": step}},
        "ok": not errors,
        "errors": errors[-1:],
        "traces": [trace],
    }


def content_of(node):
    return node["message"]["content"]


def write_traces(run_dir, seed, step, profile, sim):
    """Append step ``step``'s episodes to rollouts/step_N/train/all/traces.jsonl (one line each, as they
    complete); drop old step dirs."""
    name = ALIASES.get(profile, profile)
    p = PROFILES.get(name, DEFAULT_EPISODE)
    root = os.path.join(run_dir, "rollouts")
    d = os.path.join(root, "step_%d" % step, "train", "all")
    os.makedirs(d, exist_ok=True)
    r = random.Random("%s:traces:%s:%d" % (seed, name, step))
    with open(os.path.join(d, "traces.jsonl"), "a") as f:
        for i, (tool, model) in enumerate(episode_seconds(name, p, r, EPISODES_PER_STEP)):
            rec = trace_record(
                step,
                i,
                tool,
                model,
                EPOCH + sim,
                random.Random("%s:%d:%d" % (seed, step, i)),
                envs=1 if name in PROFILES else 2,
            )
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
    shutil.rmtree(os.path.join(root, "step_%d" % (step - TRACE_STEPS_KEPT)), ignore_errors=True)


def inference_gauges(p, r):
    """The orchestrator's scrape of vLLM's /metrics: inference/agg/<gauge>/{mean,min,max}."""
    out = {}
    for name, key in (
        ("kv_cache_usage_perc", "kv"),
        ("num_requests_running", "running"),
        ("num_requests_waiting", "waiting"),
    ):
        v = p[key] * r.uniform(0.9, 1.1)
        if key == "kv":
            v = min(v, 1.0)
        out.update(
            {
                "inference/agg/%s/mean" % name: v,
                "inference/agg/%s/min" % name: v * 0.8,
                "inference/agg/%s/max" % name: min(v * 1.1, 1.0) if key == "kv" else v * 1.2,
            }
        )
    return out


def profile_values(profile, seed, step, saving):
    """The time/* split of one step, for --profile (None for the default run)."""
    p = PROFILES.get(ALIASES.get(profile, profile))
    if p is None:
        return None
    r = random.Random("%s:profile:%s:%d" % (seed, profile, step))

    def j(x):
        return x * r.uniform(0.9, 1.1)

    tr = {
        "time/wait_for_batch": j(p["wait"]),
        "time/load_data": j(p["load"]),
        "time/forward_backward": j(p["fb"]),
        "time/broadcast_weights": j(p["bcast"]),
        "time/save_ckpt": j(p["save"]) if saving else 0.0,
    }
    tr["time/step"] = sum(tr.values()) + j(0.3)
    orch = {
        "time/step": tr["time/step"] * r.uniform(0.97, 1.03),
        "time/wait_for_policy": j(p["hold"]),
        "time/pack": j(0.05),
        "progress/rollouts": 128,
        "off_policy/mean": r.uniform(0.5, 1.0),
    }
    orch.update(rollout_timing(j(p["gen"]), j(p["tools"]), r))
    return tr, orch, inference_gauges(p, r)


def trainer_line(step, v):
    return (
        "Step %d | %7s | Loss %.4f | Entropy %.4f | Mismatch KL %.4f | Grad. Norm %.4f | LR %.2e | "
        "Throughput %d tokens/s | MFU %.1f%% | Peak Mem. %.1f GiB"
        % (
            step,
            fmt_time(v["time/step"]),
            v["loss/mean"],
            v["entropy/all/mean"],
            v["mismatch_kl/all/mean"],
            v["optim/grad_norm"],
            v["optim/lr"],
            v["perf/throughput"],
            v["perf/mfu"],
            v["perf/peak_memory"],
        )
    )


def orchestrator_line(step, v):
    t = v["orch/trainable"]
    return (
        "Step %d | %7s | Reward %.4f | Trainable %d/128 (%.1f%%) | Turns 1.0 | Branches 1.0 | "
        "Max Off-Policy 1 | Error 0.0%% | Cancelled 0.0%% | Truncation %.1f%%"
        % (step, fmt_time(v["time/step"] * 0.8), v["orch/reward"], t, 100.0 * t / 128, v["orch/truncation"])
    )


def default_split(step_time, saving):
    """The default run's time/* split: a balanced pipeline (no component above 40%)."""
    save = 0.3 * step_time if saving else 0.0
    return {
        "time/wait_for_batch": 0.3 * step_time,
        "time/load_data": 0.03 * step_time,
        "time/forward_backward": 0.38 * step_time,
        "time/broadcast_weights": 0.07 * step_time,
        "time/save_ckpt": save,
        "time/step": step_time + save,
    }


def write_checkpoint(run_dir, step, seed):
    d = os.path.join(run_dir, "checkpoints", "step_%d" % step)
    os.makedirs(os.path.join(d, "trainer"), exist_ok=True)
    os.makedirs(os.path.join(d, "orchestrator"), exist_ok=True)
    payload = random.Random("%s:ckpt:%d" % (seed, step)).getrandbits(8 * 4096).to_bytes(4096, "little")
    with open(os.path.join(d, "trainer", "model.bin"), "wb") as f:
        f.write(payload)
    with open(os.path.join(d, "trainer", ".metadata"), "wb") as f:  # torch DCP writes it last
        f.write(json.dumps({"step": step, "files": ["model.bin"]}).encode())
    tmp = os.path.join(d, "orchestrator", "progress.pt.tmp")
    with open(tmp, "wb") as f:
        f.write(json.dumps({"step": step}).encode())
    os.replace(tmp, os.path.join(d, "orchestrator", "progress.pt"))  # atomic, as prime-rl does
    return d


def write_partial_checkpoint(run_dir, step, seed):
    """A checkpoint cut short mid-save: part of trainer/model.bin, no .metadata, no orchestrator half."""
    d = os.path.join(run_dir, "checkpoints", "step_%d" % step)
    if os.path.exists(os.path.join(d, "trainer", ".metadata")):
        return None  # complete already: a kill never spoils a finished save
    os.makedirs(os.path.join(d, "trainer"), exist_ok=True)
    payload = random.Random("%s:ckpt:%d" % (seed, step)).getrandbits(8 * 4096).to_bytes(4096, "little")
    with open(os.path.join(d, "trainer", "model.bin"), "wb") as f:
        f.write(payload[:1024])
    # dated an hour back: nothing writes it any more, and a monitor must not read "being written" into it
    then = time.time() - 3600
    for p in (os.path.join(d, "trainer", "model.bin"), os.path.join(d, "trainer"), d):
        os.utime(p, (then, then))
    return d


def checkpoint_done(run_dir, step):
    """Both halves of step_N are there (what --resume-step needs)."""
    d = os.path.join(run_dir, "checkpoints", "step_%d" % step)
    return os.path.isfile(os.path.join(d, "trainer", ".metadata")) and os.path.isfile(
        os.path.join(d, "orchestrator", "progress.pt")
    )


def write_config(run_dir, max_steps):
    """The resolved config prime-rl writes at start (only what the probe reads from it)."""
    if max_steps <= 0:
        return
    d = os.path.join(run_dir, "configs")
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, "trainer.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"max_steps": max_steps}, f)
    os.replace(tmp, os.path.join(d, "trainer.json"))


def owner_gone(path, claimed=False):
    """True when ``path`` names an owner process that has ended. Without the file: False (no owner), unless the
    run had one when it started (``claimed``): then the file was released or deleted with the sandbox (a test's
    or a benchmark's temporary home), and a run left so would go on for hours, writing into nothing."""
    if not path:
        return False
    try:
        with open(path) as fh:
            owner = json.load(fh)
        pid = int(owner["pid"])
    except FileNotFoundError:
        return claimed
    except (OSError, ValueError, KeyError, TypeError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # alive, another user's
    try:
        with open("/proc/%d/stat" % pid) as fh:
            stat = fh.read()
        rest = stat[stat.rfind(")") + 2 :].split()
    except (OSError, ValueError):
        return False  # no /proc here: the pid answered, that is all we know
    return rest[0] == "Z" or (owner.get("start") is not None and int(rest[19]) != int(owner["start"]))


def paced_steps(seed, step_seconds, max_steps, first=1, burst=0):
    """(step, step_values) from step ``first``: the first ``burst`` of them at once, then one per
    ``step_seconds`` of wall time; forever when max_steps <= 0."""
    start, step, paced = time.monotonic(), first - 1, 0
    while max_steps <= 0 or step < max_steps:
        step += 1
        if step >= first + burst:
            paced += 1
            delay = start + paced * step_seconds - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        yield step, step_values(seed, step, step_seconds)


def run_runbook(run_dir, seed=0, step_seconds=1.0, max_steps=0, owner=None, claimed=False):
    """A plain training script: training.csv rows and "step N loss L" lines, nothing prime-rl-shaped."""
    logs = os.path.join(run_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    path = os.path.join(run_dir, "training.csv")
    fresh = not os.path.exists(path)
    with open(path, "a", buffering=1) as csv, open(os.path.join(logs, "trainer.log"), "a", buffering=1) as log:
        if fresh:
            csv.write("step,loss,lr,toks_per_s\n")
        log.write("loading model (simulated plain-script trainer, seed=%s)\n" % seed)
        for step, v in paced_steps(seed, step_seconds, max_steps):
            if owner_gone(owner, claimed):
                log.write("the app that owned this demo run ended: stopping\n")
                return 0
            csv.write("%d,%.4f,%.1e,%.0f\n" % (step, v["loss/mean"], v["optim/lr"], v["perf/throughput"]))
            log.write("step %d loss %.4f\n" % (step, v["loss/mean"]))
        log.write("done\n")
    return 0


def timed(v, seed, step, max_steps, ckpt_interval, profile):
    """Complete one step's values ``v`` with its time/* split; (last step?, saving?, profile values or None)."""
    last = max_steps > 0 and step == max_steps
    saving = ckpt_interval > 0 and (step % ckpt_interval == 0 or last)
    prof = profile_values(profile, seed, step, saving)
    v.update(default_split(v["time/step"], saving) if prof is None else prof[0])
    return last, saving, prof


def run(
    run_dir,
    seed=0,
    step_seconds=1.0,
    max_steps=0,
    ckpt_interval=10,
    profile="default",
    write_metrics=True,
    runbook=False,
    resume_step=None,
    head_start=0,
    config=None,
    torn_save=False,
    owner=None,
):
    if profile not in PROFILE_NAMES:
        raise ValueError("unknown profile %r; one of %s" % (profile, ", ".join(PROFILE_NAMES)))
    claimed = bool(owner) and os.path.exists(owner)  # the run has an owner: its file going away stops it too
    write_config(run_dir, max_steps)
    if runbook:
        return run_runbook(run_dir, seed, step_seconds, max_steps, owner, claimed)
    if resume_step is not None and not checkpoint_done(run_dir, resume_step):
        sys.stderr.write("no complete checkpoint step_%d in %s\n" % (resume_step, os.path.join(run_dir, "checkpoints")))
        return 1
    logs = os.path.join(run_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    tr = open(os.path.join(logs, "trainer.log"), "a", buffering=1)
    orch = open(os.path.join(logs, "orchestrator.log"), "a", buffering=1)
    metrics = open(os.path.join(run_dir, "metrics.jsonl") if write_metrics else os.devnull, "a", buffering=1)
    first = 1 if resume_step is None else resume_step + 1
    sim = 0.0  # the simulated clock goes on where the checkpoint left it (the steps before, replayed)
    for step in range(1, first):
        v = step_values(seed, step, step_seconds)
        timed(v, seed, step, max_steps, ckpt_interval, profile)
        sim += v["time/step"]
    if config:
        tr.write(line(sim, "INFO", "Config: %s" % config))
    if resume_step is None:
        tr.write(line(sim, "INFO", "Starting from step 1 (total_tokens=0, total_samples=0)"))
    else:
        tr.write(line(sim, "INFO", "Resuming from checkpoint step_%d: starting from step %d" % (resume_step, first)))
    orch.write(line(sim, "INFO", "Starting orchestrator (simulated, seed=%s)" % seed))
    state = {"step": first - 1, "sim": sim}

    def on_sigterm(signum, frame):
        if state.get("busy"):  # a step is being written: it ends first (its line, metrics, traces, checkpoint)
            state["pending"] = signum
            return
        stop(signum)

    def stop(signum):
        cut = state["step"] + 1
        note = ""
        if torn_save and ckpt_interval > 0 and write_partial_checkpoint(run_dir, cut, seed) is not None:
            note = " (the checkpoint save of step %d was cut short: step_%d is half-written)" % (cut, cut)
        tr.write(
            line(state["sim"], "WARNING", "Received SIGTERM: the run stops after step %d%s" % (state["step"], note))
        )
        for f in (tr, orch, metrics):
            f.close()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    burst = head_start if resume_step is None else 0
    for step, v in paced_steps(seed, step_seconds, max_steps, first, burst):
        if owner_gone(owner, claimed):
            tr.write(
                line(
                    sim,
                    "WARNING",
                    "The app that owned this demo run ended: the run stops after step %d" % state["step"],
                )
            )
            break
        profile = switched_profile(run_dir, profile)
        last, saving, prof = timed(v, seed, step, max_steps, ckpt_interval, profile)
        if prof is not None and prof[1]["time/wait_for_policy"] > 1.0:
            orch.write(
                line(
                    sim + 0.1,
                    "INFO",
                    "Holding batch %d until the trainer publishes policy v%d "
                    "(currently v%d)" % (step, max(0, step - 2), max(0, step - 3)),
                )
            )
        sim += v["time/step"]
        state["busy"] = True
        orch.write(line(sim - 0.2, "SUCCESS", orchestrator_line(step, v)))
        tr.write(line(sim, "SUCCESS", trainer_line(step, v)))
        if prof is not None:
            orow = {"step": step, "time": round(sim - 0.2, 3)}
            orow.update({k: round(x, 6) for k, x in prof[1].items()})
            metrics.write(json.dumps(orow) + "\n")
        row = {"step": step, "time": round(sim, 3)}
        row.update({k: round(x, 6) for k, x in v.items() if not k.startswith("orch/")})
        metrics.write(json.dumps(row) + "\n")
        if prof is not None:  # the periodic record of the orchestrator's inference metrics (no step)
            prow = {"_timestamp": round(sim, 3)}
            prow.update({k: round(x, 6) for k, x in prof[2].items()})
            metrics.write(json.dumps(prow) + "\n")
        write_traces(run_dir, seed, step, profile, sim)
        if saving:
            tr.write(
                line(
                    sim,
                    "INFO",
                    (
                        "Writing final checkpoint"
                        if last and step % ckpt_interval
                        else "Saving checkpoint at step %d" % step
                    ),
                )
            )
            write_checkpoint(run_dir, step, seed)
        state["step"], state["sim"], state["busy"] = step, sim, False
        if state.get("pending"):
            stop(state["pending"])
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        tr.write(line(sim, "SUCCESS", "RL trainer finished!"))
    for f in (tr, orch, metrics):
        f.close()
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="simulated prime-rl trainer (prime-train-tui demo)")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step-seconds", type=float, default=2.0)
    ap.add_argument("--max-steps", type=int, default=0, help="0 = run until killed")
    ap.add_argument("--ckpt-interval", type=int, default=10, help="0 = no checkpoints")
    ap.add_argument(
        "--profile",
        choices=PROFILE_NAMES,
        default=None,
        help="timing profile of the steps (default: $%s, else default; <run dir>/%s switches it "
        "while running)" % (PROFILE_ENV, PROFILE_FILE),
    )
    ap.add_argument("--no-metrics", action="store_true", help="write no metrics.jsonl (console lines only)")
    ap.add_argument("--runbook", action="store_true", help="a plain script writing training.csv, not prime-rl")
    ap.add_argument("--resume-step", type=int, help="continue from the complete checkpoint step_N (appending)")
    ap.add_argument("--head-start", type=int, default=0, help="write a fresh run's first N steps at once")
    ap.add_argument("--config", help="the run's config (only named in the log)")
    ap.add_argument("--torn-save", action="store_true", help="on SIGTERM, leave the next checkpoint half-written")
    ap.add_argument("--owner-file", help="stop once the process this JSON file names has ended")
    a = ap.parse_args(argv)
    if a.profile is None:
        a.profile = os.environ.get(PROFILE_ENV, "").strip() or "default"
        if a.profile not in PROFILE_NAMES:
            ap.error("$%s=%r is not a profile; one of %s" % (PROFILE_ENV, a.profile, ", ".join(PROFILE_NAMES)))
    return run(
        a.run_dir,
        a.seed,
        a.step_seconds,
        a.max_steps,
        a.ckpt_interval,
        a.profile,
        not a.no_metrics,
        a.runbook,
        a.resume_step,
        max(0, a.head_start),
        a.config,
        a.torn_save,
        a.owner_file,
    )


if __name__ == "__main__":
    sys.exit(main())
