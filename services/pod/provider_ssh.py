"""SSH as providers really give it: no SFTP, endpoints that run no commands, pods without python3.

The commands here are POSIX ``sh`` (run as ``sh -c SCRIPT NAME ARGS...``, so the user's login shell, bash,
fish or zsh, only has to start ``sh``) and their answers carry markers (``ptt-...``) that a proxy which does not
run our commands never prints: a missing marker is how an interactive-shell-only endpoint is recognised.

- Uploads without SFTP (:func:`upload_command`): the files travel base64-encoded, one line each, over ONE exec
  channel's stdin; each is written to a temp name beside its target, checked (sha256 by ``sha256sum``, else by
  ``python3``; with neither, its size), chmodded and renamed into place (rename is atomic within a directory).
- The probe's start (:func:`probe_command`) first checks ``python3`` (present, 3.8 or newer) and says so with
  a marker line, the pod's /etc/os-release following a missing one, so that the message can name the install
  command for that distribution (:func:`python_missing`).
"""

from __future__ import annotations

import base64
import hashlib
import re
import shlex

from services.errors import ExecRefused, PythonMissing

EXEC_OK = "ptt-exec-ok"  # the canary: an endpoint that runs commands echoes it back
UPLOAD_OK = "ptt-upload-ok"
PROBE_GO = b"ptt-probe-go"  # the probe's start: python3 is fine, its files verified, the probe follows
NO_PYTHON = b"ptt-python-missing"  # then "" (not installed) or what `python3 -V` said; then /etc/os-release
MIN_PYTHON = (3, 8)

CANARY = f"echo {EXEC_OK}"

_UPLOAD = (
    r"""tok=$1; shift
ok() {
  if command -v sha256sum >/dev/null 2>&1; then set -- "$(sha256sum < "$1")" "$2"; [ "${1%% *}" = "$2" ]
  elif command -v python3 >/dev/null 2>&1; then
    [ "$(python3 -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())' < "$1")" = "$2" ]
  else [ "$(($(wc -c < "$1")))" = "$3" ]
  fi
}
while [ $# -ge 4 ]; do
  p=$1 m=$2 h=$3 n=$4; shift 4
  case $p in */*) d=${p%/*};; *) d=.;; esac
  t=$p.$tok.tmp
  mkdir -p -- "${d:-/}" || exit 3
  IFS= read -r b || { echo "the upload of $p ended early" >&2; exit 3; }
  printf '%s' "$b" | base64 -d > "$t" || { rm -f -- "$t"; exit 3; }
  ok "$t" "$h" "$n" || { rm -f -- "$t"; echo "$p arrived damaged (its checksum differs)" >&2; exit 4; }
  chmod "$m" "$t" && mv -f -- "$t" "$p" || { rm -f -- "$t"; exit 3; }
done
echo """
    + UPLOAD_OK
)

_EXISTS = 'if test -e "$1"; then echo ptt-yes; else echo ptt-no; fi'

_PROBE = (
    f"if ! command -v python3 >/dev/null 2>&1; then\n"
    f"  echo {NO_PYTHON.decode()}; cat /etc/os-release 2>/dev/null; exit 86\n"
    "fi\n"
    f"if ! python3 -c 'import sys; sys.exit(sys.version_info < {MIN_PYTHON})' 2>/dev/null; then\n"
    f'  echo "{NO_PYTHON.decode()} $(python3 -V 2>&1 | head -n 1)"; cat /etc/os-release 2>/dev/null; exit 86\n'
    "fi\n"
    'exec "$@"'
)

# the shells' and env's words for it: "sh: 1: python3: not found", "bash: line 1: python3: command not found",
# "env: 'python3': No such file or directory"
_PY_NOT_FOUND = re.compile(r"python3'?:\s+(?:command not found|not found|No such file or directory)")


def upload_command(files: list[tuple[bytes, str, int]], token: str) -> tuple[str, bytes]:
    """The command and its stdin that write ``files`` [(data, remote, mode)] in this order, each atomically;
    it prints UPLOAD_OK at the end. ``token`` makes the temp names unique to this upload."""
    args = ["ptt-upload", token]
    lines = []
    for data, remote, mode in files:
        args += [remote, f"{mode & 0o7777:o}", hashlib.sha256(data).hexdigest(), str(len(data))]
        lines.append(base64.b64encode(data) + b"\n")
    return f"sh -c {shlex.quote(_UPLOAD)} {shlex.join(args)}", b"".join(lines)


def exists_command(remote: str) -> str:
    return f"sh -c {shlex.quote(_EXISTS)} ptt-exists {shlex.quote(remote)}"


def exists_answer(out: str) -> bool | None:
    """What :func:`exists_command` said: True/False, None when it did not answer (the command did not run)."""
    words = out.split()
    return True if "ptt-yes" in words else False if "ptt-no" in words else None


def probe_command(argv: list[str]) -> str:
    """Run ``argv`` (the guarded probe: services/pod/trusted.py) once python3 is checked: the first stdout line
    is NO_PYTHON followed by /etc/os-release (and the command ends), else the guard's (PROBE_GO once the
    probe's files are verified)."""
    return f"sh -c {shlex.quote(_PROBE)} ptt-probe {shlex.join(argv)}"


def python_not_found(command: str, status: int, output: str) -> bool:
    """A command that ran python3 ended with 127 and the shell's "python3: not found"."""
    return status == 127 and "python3" in command and bool(_PY_NOT_FOUND.search(output))


def exec_refused() -> ExecRefused:
    return ExecRefused(
        "this SSH endpoint only offers an interactive shell; monitoring needs to run commands. "
        "Use the pod's public IP and TCP port instead (RunPod → Connect → SSH over exposed TCP)"
    )


_INSTALL = (  # (ids in ID / ID_LIKE, the distribution family, its one-line install)
    (("debian", "ubuntu"), "Debian/Ubuntu", "apt-get install -y python3"),
    (("rhel", "fedora", "centos", "rocky", "almalinux", "amzn"), "RHEL/Fedora", "dnf install -y python3"),
    (("alpine",), "Alpine", "apk add python3"),
)


def install_line(os_release: str) -> str:
    """How to install python3 on the pod, from its /etc/os-release; all the common ones when it is not known."""
    fields: dict[str, str] = {}
    for line in os_release.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("'\"")
    ids = {fields.get("ID", "").lower(), *fields.get("ID_LIKE", "").lower().split()} - {""}
    for names, _family, command in _INSTALL:
        if ids & set(names):
            name = fields.get("PRETTY_NAME") or fields.get("NAME") or fields.get("ID")
            return f"on {name}: {command}"
    return "; ".join(f"{family}: {command}" for _names, family, command in _INSTALL)


def python_missing(found: str, os_release: str) -> PythonMissing:
    """``found``: what ``python3 -V`` said ("" when there is no python3 at all)."""
    need = ".".join(map(str, MIN_PYTHON))
    install = install_line(os_release)
    if not found.strip():
        return PythonMissing(
            f"the pod has no python3, which monitoring and the pod's helpers need ({need} or newer). "
            f"Install it on the pod ({install}), then reconnect"
        )
    return PythonMissing(
        f"the pod's python3 is too old or does not run ({found.strip()[:80]}); monitoring needs "
        f"Python {need} or newer. Install it on the pod ({install}), then reconnect"
    )


def python_answer(lines: list[bytes]) -> PythonMissing:
    """The NO_PYTHON answer of :func:`probe_command` (its first line, then /etc/os-release) as the error."""
    first = lines[0].decode("utf-8", "replace") if lines else ""
    found = first[len(NO_PYTHON) :].strip() if first.startswith(NO_PYTHON.decode()) else ""
    return python_missing(found, b"".join(lines[1:]).decode("utf-8", "replace"))
