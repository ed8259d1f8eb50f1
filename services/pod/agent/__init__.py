"""Everything in this folder is uploaded to a pod and runs there: standard library only (``pynvml`` and
``psutil`` are used when the pod has them), Python 3.6+ for the lifecycle helper, 3.8+ for the others.

Each script is uploaded with the siblings it imports, into one directory named by the hash of all of them
(``services.pod.connection.bundle``); on the pod they import each other by bare name. This module is the
laptop's list of those bundles (the script itself is always one of the files)."""

from pathlib import Path

AGENT_DIR = Path(__file__).parent
COMMON = AGENT_DIR / "common.py"  # what every pod script shares: one definition of the checkpoint rules

PROBE = AGENT_DIR / "probe.py"
# the probe last: its presence says the dir is whole
PROBE_FILES = (COMMON, AGENT_DIR / "traces.py", AGENT_DIR / "rundir.py", AGENT_DIR / "signals.py", PROBE)

LIFECYCLE = AGENT_DIR / "lifecycle.py"
LIFECYCLE_FILES = (LIFECYCLE, COMMON, AGENT_DIR / "actions.py", AGENT_DIR / "podlock.py", AGENT_DIR / "preflight.py")

BACKUP = AGENT_DIR / "backup.py"
BACKUP_FILES = (COMMON, AGENT_DIR / "transfer.py", AGENT_DIR / "restore.py", BACKUP)  # the agent last

ROLLOUTS_FILES = (COMMON, AGENT_DIR / "rollouts.py")  # the Rollouts view's reader, the script last
