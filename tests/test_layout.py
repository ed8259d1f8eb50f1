"""The architecture's import rules, checked on the source: services/ never imports Textual, widgets/
do no I/O, and heavy libraries are not imported at start-up."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
IO_MODULES = {"asyncssh", "httpx", "boto3", "botocore", "wandb", "subprocess", "socket", "paramiko",
              "services.ssh", "services.monitor", "services.probe"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def sources(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


@pytest.mark.parametrize("path", sources("services"), ids=lambda p: str(p.relative_to(REPO)))
def test_services_never_import_textual(path):
    bad = {m for m in imported_modules(path) if m == "textual" or m.startswith(("textual.", "app.", "widgets."))
           or m in ("app", "widgets")}
    assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", sources("widgets"), ids=lambda p: str(p.relative_to(REPO)))
def test_widgets_do_no_io(path):
    bad = {m for m in imported_modules(path) if m in IO_MODULES or m.split(".")[0] in IO_MODULES}
    assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


def test_probe_is_standard_library_only():
    allowed_optional = {"pynvml", "psutil", "pod_common", "probe_run"}  # + its siblings, uploaded with it
    mods = {m.split(".")[0] for m in imported_modules(REPO / "services" / "probe.py")}
    third_party = {m for m in mods - set(sys.stdlib_module_names) if m not in allowed_optional}
    assert third_party == set(), f"the probe runs on pods with only the standard library: {third_party}"


def test_heavy_libraries_are_not_imported_at_startup():
    code = ("import sys, app.cli, app.tui; "
            "print(','.join(sorted(m for m in ('boto3','wandb','asyncssh','httpx') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
