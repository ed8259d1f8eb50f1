"""Where settings live and how pods.toml is read and written.

``$PRIME_TRAIN_TUI_CONFIG_DIR`` overrides the folder (tests use it); otherwise
``$XDG_CONFIG_HOME/prime-train-tui`` or ``~/.config/prime-train-tui``.

pods.toml::

    [pods.h100-a]
    host = "203.0.113.7"      # or an alias from ~/.ssh/config
    user = "root"
    port = 22
    run_dir = "/workspace/run"
    price_per_hr = 23.92
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.atomic import atomic_write_text
from services.errors import PodSpecError, SettingsError
from services.models import Pod, PodKind
from services.pod.specs import POD_KEYS, pod_from_table, pod_to_table
from services.tomlfile import TomlFile, kinds_of, read_toml, show, show_value

if TYPE_CHECKING:  # imported where used: the command line loads only what its subcommand needs
    from services.backup.s3 import BackupSettings
    from services.lifecycle.preflight import LifecycleSettings
    from services.monitor.health import HealthSettings
    from services.offers.settings import OfferSettings

APP_NAME = "prime-train-tui"


def config_dir() -> Path:
    override = os.environ.get("PRIME_TRAIN_TUI_CONFIG_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser() / APP_NAME


def data_dir() -> Path:
    """Data the app keeps (config versions, run records): ``$PRIME_TRAIN_TUI_DATA_DIR`` or
    ``$XDG_DATA_HOME/prime-train-tui`` (default ``~/.local/share/prime-train-tui``)."""
    override = os.environ.get("PRIME_TRAIN_TUI_DATA_DIR")
    if override:
        return Path(override).expanduser()
    return Path(os.environ.get("XDG_DATA_HOME") or "~/.local/share").expanduser() / APP_NAME


def pods_file() -> Path:
    return config_dir() / "pods.toml"


class SavedPods(list):
    """The usable pods of pods.toml; ``broken`` maps the name of each entry that cannot be used to its
    SettingsError (that entry alone is left out, and kept in the file when the app rewrites it)."""

    def __init__(self, pods: list[Pod], broken: dict[str, SettingsError]) -> None:
        super().__init__(pods)
        self.broken = broken


def load_pods(path: Path | None = None) -> SavedPods:
    """Pods saved in pods.toml; a missing file is no pods. A file that cannot be read or parsed →
    SettingsError naming the spot; one bad ``[pods.NAME]`` entry disables only that pod (``.broken``)."""
    doc = read_toml(path or pods_file())
    doc.only_tables(["pods"])
    pods, broken = [], {}
    for name, table in doc.table("pods").items():
        try:
            if not name.isprintable() or not name.strip():
                raise doc.fail(f"pod name {show(name)} cannot be used: letters, digits and punctuation only", "pods")
            if isinstance(table, dict):
                doc.check(table, ("pods", name), dict.fromkeys(POD_KEYS))
            try:
                pods.append(pod_from_table(name, table))
            except PodSpecError as exc:
                said = str(exc) if str(exc).startswith(f"pods.{name}") else f"pods.{name}: {exc}"
                raise doc.fail(said, "pods", name, hint=exc.hint or "fix the pod's table by hand") from None
        except SettingsError as exc:
            broken[name] = exc
    return SavedPods(pods, broken)


def broken_pod_notes(pods: list[Pod]) -> list[str]:
    """One line per pods.toml entry left out (what is wrong with it and what to do)."""
    return [
        f"{exc} {exc.hint}".strip() + " — this pod is left out, the others work"
        for exc in getattr(pods, "broken", {}).values()
    ]


def save_pods(pods: list[Pod], path: Path | None = None, keep: Iterable[str] = ()) -> None:
    """Write the SSH pods to pods.toml atomically, keeping comments of the existing file and a .bak. The
    entries named in ``keep`` (those load_pods could not use) stay as they are unless a pod replaces them."""
    import tomlkit  # only to write (comments kept): not on the way to the first screen

    path = path or pods_file()
    current = read_toml(path)  # a broken file is a SettingsError: never written over
    if current.exists:
        try:
            doc = tomlkit.parse(current.text)
        except tomlkit.exceptions.ParseError as exc:  # tomllib read it, tomlkit cannot keep its comments
            raise current.fail(f"cannot be rewritten with its comments kept: {exc}") from None
    else:
        doc = tomlkit.document()
        doc.add(tomlkit.comment("prime-train-tui pods; edited by the app (comments are kept)"))
    wanted = {p.name: p for p in pods if p.kind is PodKind.SSH}
    table = doc.get("pods")
    if not isinstance(table, dict):
        table = tomlkit.table(is_super_table=True)
        doc["pods"] = table
    kept = set(keep)
    for name in [n for n in table if n not in wanted and n not in kept]:
        del table[name]
    for name, pod in wanted.items():
        fresh = pod_to_table(pod)
        if name in table:
            existing = table[name]
            for key in [k for k in existing if k not in fresh]:
                del existing[key]
            for key, value in fresh.items():
                if existing.get(key) != value:
                    existing[key] = value
        else:
            entry = tomlkit.table()
            for key, value in fresh.items():
                entry[key] = value
            table[name] = entry
    atomic_write_text(path, tomlkit.dumps(doc), backup=True)


def add_saved_pod(pod: Pod, path: Path | None = None) -> None:
    """Add (or replace) one pod in pods.toml, re-reading the file so others' edits survive."""
    path = path or pods_file()
    saved = load_pods(path)
    save_pods([*(p for p in saved if p.name != pod.name), pod], path, keep=saved.broken)


def remove_saved_pod(name: str, path: Path | None = None) -> None:
    """Remove one pod from pods.toml (the previous file stays as pods.toml.bak)."""
    path = path or pods_file()
    current = load_pods(path)
    if any(p.name == name for p in current):
        save_pods([p for p in current if p.name != name], path, keep=current.broken)


def _state_file() -> Path:
    return data_dir() / "state.toml"


def last_config() -> Path | None:
    """The config the Config pane had open last time, if it still exists."""
    try:
        data = read_toml(_state_file()).data
    except SettingsError:
        return None  # the app's own state: a broken one only costs the convenience
    value = data.get("last_config")
    path = Path(value) if isinstance(value, str) else None
    return path if path is not None and path.is_file() else None


def remember_config(path: Path) -> None:
    """Record the config just opened, so a plain ``prime-train-tui`` opens it again."""
    import tomlkit

    state = _state_file()
    try:
        current = read_toml(state)
        doc = tomlkit.parse(current.text) if current.exists else tomlkit.document()
    except (SettingsError, tomlkit.exceptions.ParseError):  # the app's own state: start it afresh
        doc = tomlkit.document()
    resolved = Path(path).expanduser().resolve()
    if resolved.is_relative_to((data_dir() / "demo-pod").resolve()):
        return  # the demo pod's own config (app/demo.py) is not the user's: a plain start never opens it
    doc["last_config"] = str(resolved)
    atomic_write_text(state, tomlkit.dumps(doc))


# ----------------------------------------------------------------------------- lifecycle settings
def settings_file() -> Path:
    return config_dir() / "settings.toml"


SETTINGS_TABLES = ("lifecycle", "offers", "health", "notify", "watch")  # the tables of settings.toml


def secret_file_warnings(home: Path | None = None) -> list[str]:
    """One line per file holding API keys or notify URLs that other users can read: settings.toml when it
    holds ``[offers] keys`` or ``[notify] urls``, and the providers' key files the app reads."""
    from services.offers.key_files import KEY_FILES
    from services.tomlfile import readable_by_others

    out = []
    path = settings_file()
    try:
        data = read_toml(path).data if os.path.isfile(path) else {}
    except SettingsError:
        data = {}  # its own error is reported where it is loaded
    offers, notify = data.get("offers"), data.get("notify")
    if (isinstance(offers, dict) and offers.get("keys")) or (isinstance(notify, dict) and notify.get("urls")):
        out.append(readable_by_others(path, "API keys or notify URLs"))
    home = Path(os.environ.get("HOME") or "~").expanduser() if home is None else home
    out += [readable_by_others(home / rel, "an API key") for rel in KEY_FILES]
    return [line for line in out if line]


def settings_doc(path: Path | None = None) -> TomlFile:
    """settings.toml read under the one error policy (services/tomlfile.py); its tables are known ones."""
    doc = read_toml(path or settings_file())
    if "backup" in doc.data:
        raise doc.fail(
            "[backup] belongs in backup.toml, beside settings.toml",
            "backup",
            hint=f"move the table to {doc.path.with_name('backup.toml')}",
        )
    doc.only_tables(SETTINGS_TABLES)
    return doc


def load_lifecycle_settings(path: Path | None = None) -> LifecycleSettings:
    """The ``[lifecycle]`` table of settings.toml (launch/resume templates, pre-flight, user checks).

    ::

        [lifecycle]
        command = "uv run rl @ {config}"          # {config} = the uploaded config, {run_dir}
        resume_args = "--resume.step {step}"
        grace_seconds = 30
        min_nofile = 65536
        expected_ckpts = 3                         # free disk needed = this x checkpoint size
        keep_last = 3
        tmux = "auto"                              # auto | tmux | setsid
        secrets = ["WANDB_API_KEY", "HF_TOKEN"]    # taken from this machine's environment
        [lifecycle.env]
        NCCL_IB_DISABLE = "1"
        [[lifecycle.checks]]
        name = "dataset has 2 files"
        run = "test $(ls /workspace/data | wc -l) -eq 2"
        fix = "download the dataset first"
    """
    from services.lifecycle.preflight import DEFAULT_ENV, LifecycleSettings, UserCheck

    doc = settings_doc(path)
    kinds = kinds_of(LifecycleSettings, skip={"runs_dir"})
    kinds.update(secrets=list, cleanup_pods=list, env=dict, checks=list)
    table = doc.table("lifecycle", kinds=kinds)
    kw = {k: v for k, v in table.items() if k not in ("env", "checks")}
    for key in ("secrets", "cleanup_pods"):
        if key in table:
            if not all(isinstance(s, str) for s in table[key]):
                raise doc.fail(f"lifecycle.{key} must be an array of strings", "lifecycle", key)
            kw[key] = tuple(table[key])
    env = doc.table("lifecycle", "env")
    for key, value in env.items():
        if isinstance(value, (dict, list)):
            raise doc.fail(f"lifecycle.env.{show(key)} must be a string, not a table or array", "lifecycle", "env", key)
    kw["env"] = {**DEFAULT_ENV, **{str(k): str(v) for k, v in env.items()}}
    checks = []
    for i, c in enumerate(table.get("checks", [])):
        if isinstance(c, dict):
            doc.check(c, ("lifecycle", "checks"), CHECK_KEYS)
        if not isinstance(c, dict) or "name" not in c or "run" not in c:
            raise doc.fail(f"lifecycle.checks[{i}] needs name and run", "lifecycle", "checks")
        checks.append(UserCheck(c["name"], c["run"], c.get("fix", ""), float(c.get("timeout", 30.0))))
    kw["checks"] = tuple(checks)
    try:
        return LifecycleSettings(**kw, runs_dir=data_dir() / "runs")
    except (TypeError, ValueError) as exc:
        raise doc.fail(f"[lifecycle]: {exc}", "lifecycle") from None


CHECK_KEYS = {"name": str, "run": str, "fix": str, "timeout": float}  # one [[lifecycle.checks]]


# ----------------------------------------------------------------------------- the watcher
WATCH_KEYS = {
    "terminate_over_budget": bool,
    "terminate_idle": bool,
    "cleanup": bool,  # [watch]
    "sweep_minutes": float,
}
SWEEP_MINUTES = 30.0


def load_watch_table(path: Path | None = None) -> dict[str, Any]:
    """The ``[watch]`` table of settings.toml (what ``prime-train-tui watch`` may do with nobody watching)::

    [watch]
    terminate_over_budget = false   # at 100 % of a rental's budget: terminate it after a final backup
    terminate_idle = false          # a rental idle for [health] idle_minutes: terminate it after a final backup
    cleanup = false                 # the cleanup daemons delete without the TUI's preview being approved
    sweep_minutes = 30              # every pod at every provider with a key, looked for (0: never)
    """
    doc = settings_doc(path)
    table = doc.table("watch", kinds=WATCH_KEYS)
    sweep = float(table.get("sweep_minutes", SWEEP_MINUTES))
    if not 0 <= sweep <= 7 * 24 * 60:
        raise doc.fail(
            f"watch.sweep_minutes must be from 0 (never) to {7 * 24 * 60} (a week), not {sweep:g}",
            "watch",
            "sweep_minutes",
        )
    return {
        "terminate_over_budget": bool(table.get("terminate_over_budget", False)),
        "terminate_idle": bool(table.get("terminate_idle", False)),
        "cleanup": bool(table.get("cleanup", False)),
        "sweep_minutes": sweep,
    }


# ----------------------------------------------------------------------------- offers settings
def cache_dir() -> Path:
    """``$PRIME_TRAIN_TUI_CACHE_DIR`` or ``$XDG_CACHE_HOME/prime-train-tui`` (default ``~/.cache/...``)."""
    override = os.environ.get("PRIME_TRAIN_TUI_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / APP_NAME


OFFER_KEYS = {
    "prime_url": str,
    "vast_url": str,
    "lambda_url": str,
    "runpod_url": str,
    "cache_ttl": float,
    "keys": dict,
    "cap_margin": float,
    "deadline_margin": float,
    "image": str,
    "disk_gb": int,
    "warn_minutes": float,
    "spot_interruptions_per_hour": dict,
}


def load_offer_settings(path: Path | None = None) -> OfferSettings:
    """The ``[offers]`` table of settings.toml::

    [offers]
    cache_ttl = 600            # seconds a fetched offer list is reused
    cap_margin = 0.10          # default max price = listed price + 10 %
    deadline_margin = 0.25     # default deadline = estimate × 1.25 + 30 min
    prime_url = "https://api.primeintellect.ai/api/v1"   # also vast_url, lambda_url, runpod_url
    spot_interruptions_per_hour = {vast = 0.2}          # overrides services/offers/spot_risk.py's
    [offers.keys]              # only when the environment and the providers' CLI files have none
    lambda = "..."
    """
    from services.offers.models import PROVIDERS

    doc = settings_doc(path)
    table = doc.table("offers", kinds=OFFER_KEYS)
    doc.table("offers", "keys", kinds=dict.fromkeys(PROVIDERS, str))
    from services.offers.spot_risk import bad_rate

    for name, rate in doc.table("offers", "spot_interruptions_per_hour", kinds=dict.fromkeys(PROVIDERS, float)).items():
        if (why := bad_rate(rate)) is not None:
            raise doc.fail(
                f"offers.spot_interruptions_per_hour.{name} {why}", "offers", "spot_interruptions_per_hour", name
            )
    from services.offers.settings import OfferSettings

    return OfferSettings.from_table(table)


def load_backup_toml() -> BackupSettings:
    """``[backup]`` of <config dir>/backup.toml with PRIME_TRAIN_TUI_BUCKET/_S3_ENDPOINT over it
    (services.backup.s3.load_backup_settings); SettingsError when it cannot be read."""
    from services.backup.s3 import load_backup_settings

    return load_backup_settings(config_dir() / "backup.toml")


# ----------------------------------------------------------------------------- health thresholds
def load_health_settings(path: Path | None = None) -> HealthSettings:
    """The ``[health]`` table of settings.toml: any field of services.monitor.health.HealthSettings, e.g.::

    [health]
    stall_cap_s = 3600      # the no-progress budget's cap (default 45 min)
    stall_start_s = 1200    # no first step this long after the run's logs started
    disk_pct = 80
    nofile_min = 65536
    """
    from dataclasses import replace

    from services.monitor.health import HealthSettings

    doc = settings_doc(path)
    kinds = kinds_of(HealthSettings)
    table = doc.table("health", kinds=dict.fromkeys(kinds))
    for key, value in table.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and value >= 0
        if not number or (kinds[key] is int and value == float("inf")):
            raise doc.fail(f"health.{key} must be a number ≥ 0, got {show_value(value)}", "health", key)
    values: dict[str, Any] = {k: int(v) if kinds[k] is int else float(v) for k, v in table.items()}
    return replace(HealthSettings(), **values)
