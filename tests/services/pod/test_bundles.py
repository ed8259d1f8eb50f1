"""The pod-side scripts share services/pod/agent/common.py (one definition of "where is the trainer's half" and
"is this step complete"), so each is uploaded WITH it: one directory per bundle, named by the hash of
every file in it. These tests check the bundles are whole (a script's imports all travel with it), that
each script runs from a copy of nothing but its bundle and fails without pod/agent/common.py, that the three
agree when run there, and that the real upload over sshd puts each bundle in its own hashed dir."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from services.backup import transfer as backup
from services.backup.transfer import PodAgent
from services.lifecycle import shell as lifecycle_shell
from services.lifecycle.shell import PodShell
from services.pod import connection
from services.pod.agent import COMMON as POD_COMMON, PROBE
from services.pod.connection import bundle
from services.pod.ssh import SSHConnection

BUNDLES = {"probe": connection.PROBE_FILES, "backup": backup.AGENT_FILES, "lifecycle": lifecycle_shell.AGENT_FILES}
SCRIPTS = {"probe": PROBE, "backup": backup.AGENT_PATH, "lifecycle": lifecycle_shell.AGENT_PATH}
OPTIONAL = {"pynvml", "psutil", "zstandard"}  # used when the pod has them (each import is guarded)


def imports(path: Path) -> set[str]:
    """Top-level module names a file imports (relative imports by their module name)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("name", BUNDLES)
def test_every_import_of_a_pod_script_travels_with_it(name):
    files = BUNDLES[name]
    names = {f.stem for f in files}
    assert POD_COMMON in files and SCRIPTS[name] in files
    for f in files:
        outside = imports(f) - set(sys.stdlib_module_names) - OPTIONAL - names
        assert outside == set(), f"{f.name} imports {outside}, which is not uploaded with it"
    assert any("common" in imports(f) for f in files)  # the script or a sibling it imports (the probe: rundir)


def test_no_pod_script_keeps_its_own_copy_of_a_shared_function():
    shared = {n.name for n in ast.parse(POD_COMMON.read_text()).body if isinstance(n, ast.FunctionDef)}
    assert {"checkpoint_complete", "trainer_ckpt_dir", "ckpt_roots", "step_dirs"} <= shared
    for f in {f for files in BUNDLES.values() for f in files} - {POD_COMMON}:
        own = {n.name for n in ast.parse(f.read_text()).body if isinstance(n, ast.FunctionDef)}
        assert not own & shared, f"{f.name} defines {own & shared} again"


def test_the_scripts_imported_from_the_repo_share_one_module():
    from services.pod.agent import (
        backup as backup_agent,
        common as pod_common,
        lifecycle as lifecycle_agent,
        rundir as probe_run,
    )

    for mod in (probe_run, backup_agent, lifecycle_agent):
        assert mod.checkpoint_complete is pod_common.checkpoint_complete
    assert backup_agent.ckpt_roots is probe_run.ckpt_roots is pod_common.ckpt_roots


def split_run(root: Path) -> Path:
    """A run whose trainer halves go to a separate [ckpt] output_dir: step 2 whole, step 4's orchestrator
    half cut short mid-save."""
    run = root / "outputs" / "r1"
    (run / "configs").mkdir(parents=True)
    (run / "configs" / "rl.json").write_text(
        json.dumps({"trainer": {"output_dir": "outputs/r1", "ckpt": {"output_dir": "vol"}}})
    )
    for step in (2, 4):
        t = root / "vol" / "checkpoints" / f"step_{step}" / "trainer"
        t.mkdir(parents=True)
        (t / ".metadata").write_bytes(b"m")
        (run / "checkpoints" / f"step_{step}" / "orchestrator").mkdir(parents=True)
    (run / "checkpoints" / "step_2" / "orchestrator" / "progress.pt").write_bytes(b"p")
    (run / "checkpoints" / "step_4" / "orchestrator" / "progress.pt.tmp").write_bytes(b"p")
    return run


def copy_bundle(files, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for f in files:
        shutil.copy(f, dest / f.name)
    return dest


def answers(where: dict[str, Path], run: Path, root: Path) -> dict[str, dict[int, bool]]:
    """Each script's verdicts, run from ``where[name]`` as a pod runs it (python3 <dir>/<script>)."""

    def run_json(script: Path, *args: str) -> list[dict]:
        res = subprocess.run(
            [sys.executable, str(script), *args],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=root,
            env={"PATH": "/usr/bin:/bin", "PTT_STATE_DIR": str(root / "state")},
        )
        assert res.returncode == 0, res.stdout + res.stderr
        return [json.loads(ln) for ln in res.stdout.splitlines() if ln.strip()]

    probe = run_json(where["probe"] / "probe.py", "--once", "--backend", "none", "--run-dir", str(run))[0]
    listed = run_json(where["backup"] / "backup.py", "list", str(run))[0]
    helper = run_json(
        where["lifecycle"] / "lifecycle.py", "ckpts", "--run-dir", str(run), "--ckpt-dir", str(run / "checkpoints")
    )[0]
    assert helper["ckpt_dir"] == str(root / "vol" / "checkpoints") == listed["trainer_dir"]
    return {
        name: {c["step"]: c["complete"] for c in out["ckpts"]}
        for name, out in (("probe", probe), ("backup", listed), ("lifecycle", helper))
    }


def test_each_script_runs_from_its_bundle_alone_and_all_three_agree(tmp_path):
    run = split_run(tmp_path)
    where = {name: copy_bundle(files, tmp_path / "pod" / name) for name, files in BUNDLES.items()}
    got = answers(where, run, tmp_path)
    assert got == {name: {2: True, 4: False} for name in BUNDLES}
    for name, files in BUNDLES.items():  # nothing but what was uploaded is left in the hashed dir
        assert sorted(p.name for p in where[name].iterdir()) == sorted(f.name for f in files)


@pytest.mark.parametrize("name", BUNDLES)
def test_a_script_without_pod_common_beside_it_fails_loudly(tmp_path, name):
    files = BUNDLES[name]
    where = copy_bundle([f for f in files if f != POD_COMMON], tmp_path / name)
    args = {"probe": ["--once", "--backend", "none"], "backup": ["list", str(tmp_path)], "lifecycle": ["status"]}[name]
    res = subprocess.run(
        [sys.executable, str(where / SCRIPTS[name].name), *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PTT_STATE_DIR": str(tmp_path)},
    )
    assert res.returncode != 0 and "No module named 'common'" in res.stderr


def modified(files, tmp_path: Path) -> tuple[Path, ...]:
    """The same bundle with a pod/agent/common.py that differs by one comment line."""
    changed = tmp_path / "changed" / POD_COMMON.name
    changed.parent.mkdir(exist_ok=True)
    changed.write_bytes(POD_COMMON.read_bytes() + b"# another version\n")
    return tuple(changed if f == POD_COMMON else f for f in files)


@pytest.mark.parametrize("name", BUNDLES)
def test_a_changed_pod_common_names_a_new_directory(tmp_path, name):
    files = BUNDLES[name]
    assert bundle(files)[1] != bundle(modified(files, tmp_path))[1]
    assert bundle(files) == bundle(tuple(files))  # stable for the same bytes


@pytest.mark.ssh
async def test_every_upload_puts_its_bundle_in_one_hashed_dir_and_runs_there(sshd, client_home, tmp_path, monkeypatch):
    client_home.trust()
    pod = sshd.pod(probe_dir=str(tmp_path / "podstate"))
    run = split_run(tmp_path)
    async with SSHConnection(pod) as conn:
        agent = PodAgent(conn)
        shell = PodShell(conn)
        probe, helper = Path(await conn.upload_probe()), Path(await shell.agent_path())
        backup_agent = Path(await agent.install())
        assert await shell.agent("status") == {"runs": []}  # installs the lifecycle helper, then runs it
        where = {"probe": probe.parent, "backup": backup_agent.parent, "lifecycle": helper.parent}
        for name, files in BUNDLES.items():
            assert where[name].name.endswith(bundle(files)[1])
            for f in files:
                assert (where[name] / f.name).read_bytes() == f.read_bytes()
        # run where they were uploaded, over ssh: the same answers as from the repo
        rc, out, err = await conn.run(f"{agent.command} list {run}")
        assert rc == 0, err
        assert {c["step"]: c["complete"] for c in json.loads(out)["ckpts"]} == {2: True, 4: False}
        assert answers(where, run, tmp_path) == {name: {2: True, 4: False} for name in BUNDLES}

        # another pod/agent/common.py: a new probe dir beside the old one, each with its own copy
        monkeypatch.setattr(connection, "PROBE_FILES", modified(connection.PROBE_FILES, tmp_path))
        other = Path(await conn.upload_probe())
        assert other.parent != probe.parent and other.name == "probe.py"
        assert (other.parent / "common.py").read_bytes().endswith(b"# another version\n")
        assert (probe.parent / "common.py").read_bytes() == POD_COMMON.read_bytes()


async def test_a_refused_install_is_the_callers_own_error_with_the_refusals_hint(tmp_path):
    """The backup agent and the lifecycle helper share one wrapper of ``trusted.install``: a refused directory
    is the caller's error class with the refusal's words and hint."""
    from services.backup.s3 import BackupError
    from services.lifecycle.events import LifecycleError
    from services.models import Pod, PodKind
    from services.pod import trusted
    from services.pod.local import LocalConnection

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # another user of the machine could plant a script there
    pod = Pod("p", kind=PodKind.LOCAL, probe_dir=str(shared))
    b = trusted.pod_bundle(pod, lifecycle_shell.AGENT_FILES, "lifecycle")
    for error in (LifecycleError, BackupError):
        with pytest.raises(error) as refused:
            await trusted.install_or_refuse(LocalConnection(pod), b, error, "cannot upload it")
        assert "is writable by other users" in str(refused.value) and "probe_dir" in str(refused.value)
        assert refused.value.hint == "or make that directory yours alone (mode 700)"
