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
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from pathlib import Path

import tomlkit

from services.atomic import atomic_write_text
from services.errors import PodSpecError, SettingsError
from services.models import Pod, PodKind
from services.pod.specs import pod_from_table, pod_to_table

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


def load_pods(path: Path | None = None) -> list[Pod]:
    """Pods saved in pods.toml; a missing file is no pods. Malformed → SettingsError naming the spot."""
    path = path or pods_file()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path} is not valid TOML: {exc}",
                            hint="fix the file by hand; the app did not change it") from None
    pods_table = data.get("pods", {})
    if not isinstance(pods_table, dict):
        raise SettingsError(f"{path}: 'pods' must be a table of [pods.NAME] sections")
    pods = []
    for name, table in pods_table.items():
        try:
            pods.append(pod_from_table(name, table))
        except PodSpecError as exc:
            raise SettingsError(f"{path}: {exc}", hint=exc.hint) from None
    return pods


def save_pods(pods: list[Pod], path: Path | None = None) -> None:
    """Write the SSH pods to pods.toml atomically, keeping comments of the existing file and a .bak."""
    path = path or pods_file()
    try:
        doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, tomlkit.exceptions.ParseError):
        doc = tomlkit.document()
        doc.add(tomlkit.comment("prime-train-tui pods; edited by the app (comments are kept)"))
    wanted = {p.name: p for p in pods if p.kind is PodKind.SSH}
    table = doc.get("pods")
    if not isinstance(table, dict):
        table = tomlkit.table(is_super_table=True)
        doc["pods"] = table
    for name in [n for n in table if n not in wanted]:
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
    current = [p for p in load_pods(path) if p.name != pod.name]
    save_pods([*current, pod], path)


def remove_saved_pod(name: str, path: Path | None = None) -> None:
    """Remove one pod from pods.toml (the previous file stays as pods.toml.bak)."""
    path = path or pods_file()
    current = load_pods(path)
    if any(p.name == name for p in current):
        save_pods([p for p in current if p.name != name], path)


def _state_file() -> Path:
    return data_dir() / "state.toml"


def last_config() -> Path | None:
    """The config the Config pane had open last time, if it still exists."""
    try:
        data = tomllib.loads(_state_file().read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    value = data.get("last_config")
    path = Path(value) if isinstance(value, str) else None
    return path if path is not None and path.is_file() else None


def remember_config(path: Path) -> None:
    """Record the config just opened, so a plain ``prime-train-tui`` opens it again."""
    state = _state_file()
    try:
        doc = tomlkit.parse(state.read_text(encoding="utf-8"))
    except (FileNotFoundError, tomlkit.exceptions.ParseError):
        doc = tomlkit.document()
    doc["last_config"] = str(Path(path).expanduser().resolve())
    atomic_write_text(state, tomlkit.dumps(doc))


# ----------------------------------------------------------------------------- lifecycle settings
def settings_file() -> Path:
    return config_dir() / "settings.toml"


def load_lifecycle_settings(path: Path | None = None) -> "LifecycleSettings":
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
    from dataclasses import fields

    from services.lifecycle.preflight import DEFAULT_ENV, LifecycleSettings, UserCheck

    path = path or settings_file()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        data = {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read {path}: {exc}") from None
    table = data.get("lifecycle", {})
    if not isinstance(table, dict):
        raise SettingsError(f"{path}: 'lifecycle' must be a table")
    known = {f.name for f in fields(LifecycleSettings)} - {"runs_dir"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise SettingsError(f"{path}: unknown key(s) in [lifecycle]: {', '.join(unknown)}",
                            hint=f"known keys: {', '.join(sorted(known))}")
    kw = {k: v for k, v in table.items() if k not in ("env", "checks", "secrets")}
    if "secrets" in table:
        kw["secrets"] = tuple(str(s) for s in table["secrets"])
    kw["env"] = {**DEFAULT_ENV, **{str(k): str(v) for k, v in dict(table.get("env", {})).items()}}
    checks = []
    for i, c in enumerate(table.get("checks", [])):
        if not isinstance(c, dict) or "name" not in c or "run" not in c:
            raise SettingsError(f"{path}: lifecycle.checks[{i}] needs name and run")
        checks.append(UserCheck(str(c["name"]), str(c["run"]), str(c.get("fix", "")),
                                float(c.get("timeout", 30.0))))
    kw["checks"] = tuple(checks)
    try:
        return LifecycleSettings(**kw, runs_dir=data_dir() / "runs")
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{path}: [lifecycle]: {exc}") from None


# ----------------------------------------------------------------------------- offers settings
def cache_dir() -> Path:
    """``$PRIME_TRAIN_TUI_CACHE_DIR`` or ``$XDG_CACHE_HOME/prime-train-tui`` (default ``~/.cache/...``)."""
    override = os.environ.get("PRIME_TRAIN_TUI_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / APP_NAME


OFFER_KEYS = {"prime_url": str, "vast_url": str, "lambda_url": str, "runpod_url": str, "cache_ttl": (int, float), "keys": dict,
              "cap_margin": (int, float), "deadline_margin": (int, float), "image": str, "disk_gb": int,
              "warn_minutes": (int, float)}


def load_offer_settings(path: Path | None = None) -> dict:
    """The ``[offers]`` table of settings.toml::

        [offers]
        cache_ttl = 600            # seconds a fetched offer list is reused
        cap_margin = 0.10          # default max price = listed price + 10 %
        deadline_margin = 0.25     # default deadline = estimate × 1.25 + 30 min
        prime_url = "https://api.primeintellect.ai/api/v1"   # also vast_url, lambda_url, runpod_url
        [offers.keys]              # only when the environment and the providers' CLI files have none
        lambda = "..."
    """
    path = path or settings_file()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read {path}: {exc}") from None
    table = data.get("offers", {})
    if not isinstance(table, dict):
        raise SettingsError(f"{path}: 'offers' must be a table")
    for key, value in table.items():
        kind = OFFER_KEYS.get(key)
        if kind is None:
            raise SettingsError(f"{path}: unknown key in [offers]: {key}", hint=f"known keys: {', '.join(OFFER_KEYS)}")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise SettingsError(f"{path}: offers.{key} has the wrong type ({type(value).__name__})")
    return table


# ----------------------------------------------------------------------------- health thresholds
def load_health_settings(path: Path | None = None) -> "HealthSettings":
    """The ``[health]`` table of settings.toml: any field of services.monitor.health.HealthSettings, e.g.::

        [health]
        stall_cap_s = 3600      # the no-progress budget's cap (default 45 min)
        stall_start_s = 1200    # no first step this long after the run's logs started
        disk_pct = 80
        nofile_min = 65536
    """
    from dataclasses import fields, replace

    from services.monitor.health import HealthSettings

    path = path or settings_file()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return HealthSettings()
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read {path}: {exc}") from None
    table = data.get("health", {})
    if not isinstance(table, dict):
        raise SettingsError(f"{path}: 'health' must be a table")
    known = {f.name: f for f in fields(HealthSettings)}
    for key, value in table.items():
        if key not in known:
            raise SettingsError(f"{path}: unknown key in [health]: {key}", hint=f"known keys: {', '.join(known)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise SettingsError(f"{path}: health.{key} must be a number ≥ 0, got {value!r}")
    kw = {k: (int(v) if known[k].type in (int, "int") else float(v)) for k, v in table.items()}
    return replace(HealthSettings(), **kw)
