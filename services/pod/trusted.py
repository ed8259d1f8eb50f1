"""Scripts run on a pod only from a private directory, and only once their content was verified.

Every pod-side script (the probe, the lifecycle helper, the backup agent) is uploaded with its siblings into
``<probe_dir>/<prefix>-<hash>/`` and started through the guard (``services/pod/agent/guard.py``), whose source
travels on the command line, never read from the pod. The guard refuses a ``probe_dir`` that is a symbolic
link, another user's, or writable by others, and runs a script only when every file of its bundle has the
sha256 we uploaded: a file planted under the expected name by another user of a shared pod (a Slurm login node
with ``probe_dir = "/tmp/ptt"``) is never run. The interpreter is the pod's ``python3``, never a path read from
the pod. See docs/pods.md.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from services.errors import PrimeTrainError, UnsafeProbeDir
from services.models import Pod
from services.pod.agent import AGENT_DIR
from services.pod.connection import DEFAULT_PROBE_DIR, Connection, bundle

GUARD_PATH = AGENT_DIR / "guard.py"
UNTRUSTED = "ptt_untrusted"  # the guard's answer when it ran nothing (guard.py's UNTRUSTED)
FILE_MODE = 0o600


@lru_cache(maxsize=1)
def _guard_source() -> str:
    """guard.py without its docstrings and comments: it travels on every command line (and shows in ``ps``)."""
    import ast  # once, at the first pod script's start: not on the way to the first screen

    tree = ast.parse(GUARD_PATH.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body.pop(0)
    return ast.unparse(tree)


def state_dir(pod: Pod) -> str:
    """The pod's ``probe_dir`` as the pod-side paths use it: relative to the SSH user's home (a leading ``~/``
    is dropped: SFTP does not expand it)."""
    base = (pod.probe_dir or DEFAULT_PROBE_DIR).rstrip("/") or "/"
    return base[2:] if base.startswith("~/") else base


@dataclass(frozen=True)
class Bundle:
    """A script and its siblings as they go to one pod: where, and what each file must hash to."""

    state: str  # the pod's probe_dir
    directory: str  # <state>/<prefix>-<hash>
    files: tuple[tuple[str, bytes], ...]
    script: str  # the file name that runs

    @property
    def manifest(self) -> str:
        return ",".join(f"{name}:{hashlib.sha256(data).hexdigest()}" for name, data in self.files)

    @property
    def script_path(self) -> str:
        return f"{self.directory}/{self.script}"

    def run_argv(self, *args: str, go: str = "", python: str = "python3", unbuffered: bool = False) -> list[str]:
        """The command line that runs the script through the guard (``go``: a line printed once verified)."""
        return [
            python,
            *(["-u"] if unbuffered else []),
            "-c",
            _guard_source(),
            "run",
            go,
            self.state,
            self.directory,
            self.manifest,
            self.script,
            *args,
        ]

    def prepare_command(self) -> str:
        return shlex.join(["python3", "-c", _guard_source(), "prepare", self.state, self.directory, self.manifest])

    def uploads(self) -> list[tuple[bytes, str, int]]:
        """[(data, path, mode)], the script last (a reader that finds it finds its siblings)."""
        return [(data, f"{self.directory}/{name}", FILE_MODE) for name, data in self.files]


def pod_bundle(pod: Pod, files: tuple[Path, ...], prefix: str, script: str = "") -> Bundle:
    """``files`` as they go to ``pod``: into ``<probe_dir>/<prefix>-<their hash>``; ``script`` (a file name)
    runs, the last file by default."""
    contents, digest = bundle(files)
    state = state_dir(pod)
    return Bundle(state, f"{state.rstrip('/')}/{prefix}-{digest}", tuple(contents), script or files[-1].name)


def untrusted(line: str | bytes) -> str | None:
    """Why the guard ran nothing, when ``line`` is its refusal; else None."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    if UNTRUSTED not in text:
        return None
    try:
        answer = json.loads(text)
    except ValueError:
        return None
    return str(answer.get(UNTRUSTED) or "untrusted") if isinstance(answer, dict) and UNTRUSTED in answer else None


def unsafe_dir(pod: Pod, why: str) -> UnsafeProbeDir:
    """The refusal, naming the fix in the message itself: it is what the Monitor and the pod list show."""
    return UnsafeProbeDir(
        f"nothing is run from probe_dir {state_dir(pod)} on {pod.name}: {why}, so another "
        "user of the pod could make a script there run as you. Set this pod's probe_dir (pods.toml) to a "
        f"directory only you can write, such as ~/{DEFAULT_PROBE_DIR} (the default)",
        hint="or make that directory yours alone (mode 700)",
    )


async def install(conn: Connection, b: Bundle) -> bool:
    """Make the bundle's directory private (or refuse: UnsafeProbeDir) and upload its files unless every one
    is already there with the expected content. One exec when nothing is missing. Returns whether it uploaded."""
    status, out, err = await conn.run(b.prepare_command(), timeout=60.0)
    answer: dict[str, Any] = {}
    for line in reversed(out.splitlines()):  # the pod's shell start-up files may print lines first
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            answer = value
            break
    if answer.get("refused"):
        raise unsafe_dir(conn.pod, str(answer["refused"]))
    if not answer.get("ok"):
        tail = ([ln for ln in (out + err).strip().splitlines() if ln.strip()] or [f"exit status {status}"])[-1]
        raise PrimeTrainError(f"cannot prepare {b.directory} on the pod: {tail[-200:]}")
    if answer.get("whole"):
        return False
    await conn.put_files(b.uploads())
    return True


async def install_or_refuse(conn: Connection, b: Bundle, error: type[PrimeTrainError], failed: str) -> bool:
    """:func:`install`, its refusal and its failure raised as ``error`` (the caller's own error class): the
    refusal's words and hint as they are, a failure as "<failed>: <why>"."""
    try:
        return await install(conn, b)
    except UnsafeProbeDir as exc:
        raise error(str(exc), hint=exc.hint) from None
    except PrimeTrainError as exc:
        raise error(f"{failed}: {exc}") from None
