"""Pre-flight checks before a launch: the 5-second checks that would have saved the field reports' runs.

Most checks run ON the pod in one call of the lifecycle helper (``pod/agent/lifecycle.py preflight``):
``ulimit -n`` (ok when the hard limit lets the run raise it), GPUs visible, a CUDA context when torch
is importable (else "skip", never a pass), free disk for the expected checkpoints, the trainer
command present, no other run active, and the user's own checks from settings. The config check
runs here, with the config validator when it is installed (else "skip").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OK, FAIL, SKIP, WARN = "ok", "fail", "skip", "warn"

# Nothing from this machine's environment goes to a pod unless the user lists it in [lifecycle] secrets
# (e.g. ["WANDB_API_KEY", "HF_TOKEN"]): a rented box's root reads every trainer's /proc/<pid>/environ.
DEFAULT_SECRETS: tuple[str, ...] = ()
# The user's long-lived S3 credentials never reach a pod (the backup signs its requests on this machine
# and hands the pod presigned URLs): never passed to the trainer, even when listed in settings.
NEVER_TO_POD = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# Nor do the providers' API keys (services/offers/providers.py PROVIDERS' key_env, the same names: a test
# checks it): each rents and terminates pods, and bills, on the user's account.
PROVIDER_KEYS = ("PRIME_API_KEY", "VAST_API_KEY", "LAMBDA_API_KEY", "RUNPOD_API_KEY")
# A field report's runbook environment for single-node PCIe boxes, plus prime-rl's own launcher defaults.
# VLLM_USE_V1=0 is NOT set: prime-rl dropped it in 2025 and vLLM 0.29 removed the variable; add it in
# [lifecycle.env] for an old stack that still needs it.
DEFAULT_ENV = {
    "PYTHONUNBUFFERED": "1",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "NCCL_IB_DISABLE": "1",
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
}


# a check's `act` → how the TUI and the command line say it (the pod-side check knows neither)
ACTS: dict[str, tuple[str, str]] = {
    "kill": ("press k", "prime-train-tui kill {pod}"),
    "cleanup": ("press c", "prime-train-tui cleanup {pod} --keep 2"),
    "force": ("then Force", "launch with --force"),
}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | fail | skip | warn
    detail: str = ""
    fix: str = ""
    act: str = ""  # the front-end's own action that fixes it (ACTS): each front-end words it its own way

    def fix_for(self, front: str, pod: str = "POD") -> str:
        """The fix in the words of one front-end: ``"tui"`` names its key, ``"cli"`` its command line."""
        words = ACTS.get(self.act)
        if not self.fix or words is None:
            return self.fix
        return f"{self.fix} ({words[front == 'cli'].format(pod=pod)})"

    @property
    def passed(self) -> bool:
        return self.status != FAIL

    @property
    def mark(self) -> str:
        return {OK: "✓", FAIL: "✗", SKIP: "–", WARN: "!"}.get(self.status, "?")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix_for("cli") or None}


@dataclass(frozen=True)
class UserCheck:
    """One line of settings: ``{name = "dataset has 2 files", run = "test $(ls data | wc -l) -eq 2"}``."""

    name: str
    run: str
    fix: str = ""
    timeout: float = 30.0


@dataclass(frozen=True)
class LifecycleSettings:
    command: str = "uv run rl @ {config}"
    resume_args: str = "--resume.step {step}"
    ckpt_subdir: str = "checkpoints"  # relative to the run dir
    grace_seconds: float = 30.0
    min_nofile: int = 65536
    expected_ckpts: int = 3
    ckpt_bytes: int = 0  # 0 = the size of the newest complete checkpoint on the pod, if any
    min_free_bytes: int = 10 * 2**30
    cuda_check: bool = True
    keep_last: int = 3
    tmux: str = "auto"  # auto | tmux | setsid
    # after the start, the pod's helper watches the run this long: one that already ended non-zero (a
    # missing file, a bad flag) is reported as an error with its log's tail instead of "started"
    start_watch_seconds: float = 2.0
    # prime-rl's own validation on the pod (services/lifecycle/dry_run.py): auto = for prime-rl's entry points
    # (a command with "@ config"), on, off; a dry run slower than the timeout is not judged
    dry_run: str = "auto"
    dry_run_timeout: float = 300.0
    secrets: tuple[str, ...] = DEFAULT_SECRETS
    env: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV))
    checks: tuple[UserCheck, ...] = ()
    runs_dir: Path | None = None  # local run records; None = do not keep them
    # cleanup daemon (services/lifecycle/auto_cleanup.py): pods it runs for ("*" = every pod), its period, the run
    # volume's ceiling, the broadcasts/step_N copies kept (prime-rl keeps every ckpt-interval one forever)
    cleanup_pods: tuple[str, ...] = ()
    cleanup_interval: float = 600.0
    disk_threshold_pct: float = 85.0
    keep_broadcasts: int = 2
    # preemption (services/lifecycle/preemption.py): SSH down this long (or the provider says terminated) marks the
    # run interrupted; auto-resume is off unless enabled, within attempts and a budget (0 = no limit),
    # on the same pod ("") or on the named one
    preempt_after_minutes: float = 10.0
    auto_resume: bool = False
    auto_resume_max_attempts: int = 3
    auto_resume_budget_usd: float = 0.0
    auto_resume_budget_hours: float = 0.0
    auto_resume_pod: str = ""

    def __post_init__(self) -> None:
        secrets = (self.secrets,) if isinstance(self.secrets, str) else tuple(str(n) for n in self.secrets)
        object.__setattr__(self, "secrets", secrets)
        billing = [n for n in secrets if n.upper() in PROVIDER_KEYS]
        if billing:
            one = len(billing) == 1
            raise ValueError(
                f"{' and '.join(billing)} {'rents and terminates' if one else 'rent and terminate'} pods "
                f"on your account: {'it never goes' if one else 'they never go'} to a pod (anyone with "
                f"root there can read the trainer's environment); remove {'it' if one else 'them'} "
                f"from secrets"
            )
        banned = [n for n in secrets if n.upper() in NEVER_TO_POD]
        if banned:
            raise ValueError(
                f"secrets must not list {', '.join(banned)}: long-lived S3 credentials never go to a "
                f"pod (the backup signs its requests on this machine); if the trainer itself needs "
                f"them, set them in the pod's own environment"
            )
        pods = self.cleanup_pods
        object.__setattr__(self, "cleanup_pods", (pods,) if isinstance(pods, str) else tuple(str(p) for p in pods))
        if not 1.0 <= float(self.disk_threshold_pct) <= 100.0:
            raise ValueError(f"disk_threshold_pct must be between 1 and 100, not {self.disk_threshold_pct}")
        if not 0.0 <= float(self.start_watch_seconds) <= 10.0:
            raise ValueError(f"start_watch_seconds must be between 0 and 10, not {self.start_watch_seconds}")
        if self.dry_run not in ("auto", "on", "off"):
            raise ValueError(f'dry_run must be "auto", "on" or "off", not {self.dry_run!r}')
        if not 1.0 <= float(self.dry_run_timeout) <= 3600.0:
            raise ValueError(f"dry_run_timeout must be between 1 and 3600 seconds, not {self.dry_run_timeout}")
        if self.cleanup_interval <= 0 or self.preempt_after_minutes < 0 or self.auto_resume_max_attempts < 0:
            raise ValueError("cleanup_interval must be > 0, preempt_after_minutes and auto_resume_max_attempts >= 0")

    def cleanup_enabled(self, pod: str) -> bool:
        return "*" in self.cleanup_pods or pod in self.cleanup_pods


def config_check(config: Path | None) -> Check:
    name = "config validates"
    if config is None:
        return Check(name, SKIP, "no config file given")
    try:
        from services.config.validate import validate_file  # the config helper's validator
    except Exception:  # noqa: BLE001 - absent or broken: say so, never pretend it passed
        return Check(name, SKIP, "skipped (validator not available)")
    try:
        report = validate_file(Path(config))
    except Exception as exc:  # noqa: BLE001 - ConfigError and friends: the file is unreadable
        return Check(name, FAIL, str(exc), getattr(exc, "hint", "") or "fix the file")
    errors = [f for f in report.findings if getattr(getattr(f, "severity", None), "value", "") == "error"]
    if errors:
        first = errors[0]
        where = f"line {first.line}: " if getattr(first, "line", 0) else ""
        return Check(
            name,
            FAIL,
            f"{len(errors)} error(s); {where}{first.message}",
            first.fix or f"validate {Path(config).name} to see every finding",
        )
    return Check(name, OK, f"{report.kind} config, {report.warnings} warning(s)")


def logins_needed(config: Path | None, secrets: tuple[str, ...]) -> dict[str, str]:
    """{credential: why} the config needs on the pod and [lifecycle] secrets does not send (W&B logging:
    WANDB_API_KEY; a gated model: HF_TOKEN). The pod's pre-flight then looks for a login of its own."""
    if config is None:
        return {}
    try:
        from services.config.credentials import needed
        from services.config.validate import read_config
        from services.tomlfile import loads

        data = loads(read_config(Path(config)))
    except Exception:  # noqa: BLE001 - unreadable or unparsable: the config check reports that
        return {}
    sent = set(secrets)
    return {name: why for name, why in needed(data).items() if name not in sent}


def login_args(config: Path | None, secrets: tuple[str, ...]) -> list[str]:
    return [arg for name, why in logins_needed(config, secrets).items() for arg in ("--login", f"{name}={why}")]


def agent_args(settings: LifecycleSettings, run_dir: str, command: str, python: str | None = None) -> list[str]:
    """Arguments of the pod-side ``preflight`` (one exec: the checkpoint size estimate is done there)."""
    args = [
        "preflight",
        "--run-dir",
        run_dir,
        "--min-nofile",
        str(settings.min_nofile),
        "--need-bytes",
        str(settings.min_free_bytes),
        "--ckpt-dir",
        settings.ckpt_subdir,
        "--expected-ckpts",
        str(settings.expected_ckpts),
        "--ckpt-bytes",
        str(settings.ckpt_bytes),
        "--trainer",
        command,
    ]
    if settings.cuda_check:
        args.append("--cuda")
    if python:
        args += ["--python", python]
    for c in settings.checks:
        args += ["--check", json.dumps({"name": c.name, "run": c.run, "fix": c.fix, "timeout": c.timeout})]
    return args


def parse_agent(result: dict[str, Any]) -> list[Check]:
    return [
        Check(c["name"], c["status"], c.get("detail", ""), c.get("fix") or "", c.get("act") or "")
        for c in result.get("checks", [])
    ]


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == FAIL]
