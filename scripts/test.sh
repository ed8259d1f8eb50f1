#!/usr/bin/env bash
# The one command that passes the tests on a fresh machine: installs what they need
# (OpenSSH's sshd, Chromium, Slurm and munge from Debian, the project and its dev extra in .venv), checks the import
# contracts, lints, checks the types and runs the whole suite.
# Extra arguments go to pytest, e.g.  scripts/test.sh -k monitor -x
# The suite runs on every core (pytest-xdist); PTT_TEST_WORKERS=0 runs it in one process.
# Property tests run derandomized (the same examples every run); PTT_HYPOTHESIS_PROFILE=explore draws new ones.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  echo "== installing openssh-server (the tests run a real sshd on 127.0.0.1)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
fi

if ! command -v chromium >/dev/null 2>&1; then
  echo "== installing chromium (tests/app/test_serve.py loads the served TUI in headless Chromium)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

if [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmd ] || [ ! -x /usr/sbin/munged ]; then
  echo "== installing slurmctld, slurmd and munge (tests/services/slurm run a real 2-node Slurm on 127.0.0.1)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PY" -m venv .venv
fi
echo "== installing prime-train-tui[dev] into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'

echo "== checking the import contracts (pyproject.toml [tool.importlinter])"
.venv/bin/lint-imports --no-cache | tail -n 8

echo "== linting and formatting (pyproject.toml [tool.ruff]; exits non-zero on a finding or an unformatted file)"
.venv/bin/ruff check app services widgets tests scripts
.venv/bin/ruff format --check app services widgets tests scripts

echo "== checking types (pyproject.toml [tool.mypy])"
.venv/bin/mypy

echo "== running the test suite"
exec .venv/bin/python -m pytest -n "${PTT_TEST_WORKERS:-auto}" --dist loadgroup \
  --hypothesis-profile="${PTT_HYPOTHESIS_PROFILE:-ci}" "$@"
