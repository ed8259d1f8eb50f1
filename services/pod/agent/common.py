"""What the pod-side scripts share (standard library only; Python 3.6+ syntax, like the scripts).

The probe (probe.py, rundir.py), the backup agent (backup.py) and the lifecycle helper
(lifecycle*.py) import this module. It is uploaded BESIDE each of them, into one directory named
by the hash of every file uploaded together (services/pod/connection.py ``bundle``), so a script never
imports a common.py of another version. Run as a script, Python puts the script's own directory
first on sys.path; imported from the repo, the scripts import ``services.pod.agent.common``.

One answer, everywhere: resume, cleanup, backup and the UI must agree on where the trainer's half of a
checkpoint lives and on whether a step_N is complete.
"""

import json
import os
import re

_STEP_RE = re.compile(r"step_(0|[1-9][0-9]{0,17})")  # ASCII digits only: str.isdigit() also takes "²", "١٢"


def parse_step(name):
    """The N of a ``step_N`` directory name, or None for any other name. The ONE parser of step numbers
    of every pod-side script: ASCII digits only (``step_²`` passes isdigit() but not int(); ``step_١٢``
    passes both as 12, then "step_%d" % 12 names another dir), at most 18 of them, no sign, no spaces, no
    leading zero: the name is exactly "step_%d" % N, the name every script rebuilds from N (prime-rl's own).
    An odd name is not a checkpoint: callers skip it, never fail on it."""
    m = _STEP_RE.fullmatch(name) if isinstance(name, str) else None
    return int(m.group(1)) if m else None


def checkpoint_complete(path, orch=None):
    """A step_N dir prime-rl could resume from; prime-rl's own "latest" does not check this. Its halves:
    trainer/.metadata (DCP writes it last) and orchestrator/progress.pt (renamed into place); a legacy
    STABLE marker counts for the trainer's. ``orch``: the step_N dir holding this step's orchestrator
    half when the run has one (an RL run): ``path`` itself, or the run dir's checkpoints/step_N when the
    trainer's checkpoints go to a separate [ckpt] output_dir (research prime-rl.md 6.1) -- then BOTH
    halves are required, wherever they live. Without it, one dir alone is judged: a half present must
    be whole, and a trainer-only dir counts (an SFT run; the trainer's side of a separate dir)."""
    trainer, stable = os.path.join(path, "trainer"), os.path.isfile(os.path.join(path, "STABLE"))
    if orch is not None:
        return (stable or os.path.isfile(os.path.join(trainer, ".metadata"))) and os.path.isfile(
            os.path.join(orch, "orchestrator", "progress.pt")
        )
    if stable:
        return True
    orch = os.path.join(path, "orchestrator")
    has_trainer, has_orch = os.path.isdir(trainer), os.path.isdir(orch)
    if not (has_trainer or has_orch):
        return False
    if has_trainer and not os.path.isfile(os.path.join(trainer, ".metadata")):
        return False
    return not has_orch or os.path.isfile(os.path.join(orch, "progress.pt"))


def trainer_ckpt_dir(run_dir):
    """Where the TRAINER half of this run's checkpoints lives: ``<ckpt.output_dir>/checkpoints`` when the
    resolved configs (configs/trainer.json, or rl.json's trainer or shared ckpt) name a separate [ckpt]
    output_dir -- the orchestrator half stays in <run_dir>/checkpoints (research prime-rl.md 6.1) --
    else <run_dir>/checkpoints. A relative output_dir is taken from the launch dir: what the config's
    own (relative) output_dir, the run dir, was relative to; else the run dir's grandparent
    (<launch dir>/outputs/<run>)."""
    run_dir = os.path.normpath(run_dir)
    for name, places in (("trainer.json", ((),)), ("rl.json", (("trainer",), ()))):
        try:
            with open(os.path.join(run_dir, "configs", name)) as fh:
                cfg = json.load(fh)
        except (OSError, ValueError):
            continue
        for place in places:
            node = cfg
            for key in place:
                node = node.get(key) if isinstance(node, dict) else None
            ckpt = node.get("ckpt") if isinstance(node, dict) else None
            out = ckpt.get("output_dir") if isinstance(ckpt, dict) else None
            if not isinstance(out, str) or not out.strip():
                continue
            if not os.path.isabs(out):
                own = node.get("output_dir") if isinstance(node.get("output_dir"), str) else ""
                own = os.path.normpath(own) if own and not os.path.isabs(own) else ""
                if own and run_dir.endswith(os.sep + own):
                    launch = run_dir[: -len(own) - 1]
                else:
                    launch = os.path.dirname(os.path.dirname(run_dir))
                out = os.path.join(launch, out)
            return os.path.join(os.path.normpath(out), "checkpoints")
    return os.path.join(run_dir, "checkpoints")


def ckpt_roots(run_dir, trainer_root=None):
    """(trainer root, orchestrator root or None): None when both halves share <run_dir>/checkpoints."""
    own = os.path.join(run_dir, "checkpoints")
    troot = trainer_root or trainer_ckpt_dir(run_dir)
    return troot, (None if os.path.realpath(troot) == os.path.realpath(own) else own)


def step_dirs(d):
    """{step: path} of the step_N dirs in ``d``; {} when ``d`` is not a dir. An unreadable ``d`` raises
    OSError (each caller decides whether that is an error to report)."""
    if not os.path.isdir(d):
        return {}
    found = {}
    for n in os.listdir(d):
        step = parse_step(n)
        if step is not None and os.path.isdir(os.path.join(d, n)):
            found[step] = os.path.join(d, n)
    return found


def has_orchestrator(run_dir, roots=()):
    """Whether the run has an orchestrator (prime-rl's ``rl``), so that a complete checkpoint needs its
    half too: the resolved configs name one, or a step_N dir in one of ``roots`` (checkpoint dirs,
    listed only when the configs do not say) holds an orchestrator/ half. An unreadable root counts
    as having none."""
    if any(os.path.isfile(os.path.join(run_dir, "configs", n)) for n in ("orchestrator.json", "rl.json")):
        return True
    for root in roots:
        try:
            steps = step_dirs(root)
        except OSError:
            continue
        if any(os.path.isdir(os.path.join(p, "orchestrator")) for p in steps.values()):
            return True
    return False
