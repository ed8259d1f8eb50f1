"""The architecture's import rules. The contracts live in pyproject.toml ([tool.importlinter]) and are
checked by import-linter here (and by scripts/test.sh); this module adds what import-linter cannot say:
no import cycles between any two modules, the pod-side agent uses the standard library alone, heavy
libraries are not imported at start-up, and a deliberate violation really fails the contracts. It also keeps
docs/architecture.md true: its module list names every module, and its layers are the contract's."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")
AGENT = REPO / "services" / "pod" / "agent"
OPTIONAL_ON_POD = {"pynvml", "psutil", "zstandard"}  # used when the pod has them, never required


def lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold():
    res = lint(REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "5 kept, 0 broken" in res.stdout


@pytest.mark.parametrize(
    "violation, contract",
    [
        (("services/units.py", "import textual\n"), "services never import the UI"),
        (("widgets/format.py", "import asyncssh\n"), "widgets do no I/O"),
        (("services/pod/agent/common.py", "from services import models\n"), "services/pod/agent imports only itself"),
        (
            ("app/screens/confirm.py", "from app.commands import _support\n"),
            "screens and panes never import the command",
        ),
        (("services/pod/ssh.py", "from services.monitor import health\n"), "services' domains import downwards only"),
    ],
)
def test_a_deliberate_violation_breaks_its_contract(tmp_path, violation, contract):
    """The contracts are not vacuous: one planted import in a copy of the tree breaks exactly that one."""
    for name in ("services", "app", "widgets"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    path, line = violation
    target = tmp_path / path
    target.write_text(target.read_text(encoding="utf-8") + "\n" + line, encoding="utf-8")
    res = subprocess.run(
        [str(LINT), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 1, res.stdout + res.stderr
    broken = [ln for ln in res.stdout.splitlines() if ln.endswith("BROKEN")]
    assert len(broken) == 1 and broken[0].startswith(contract), res.stdout


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in modules}
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_module_imports_itself_through_others():
    """No import cycles anywhere (lazy imports inside functions count: they hide a cycle, not remove it)."""
    graph = grimp.build_graph("services", "app", "widgets")
    modules = {m for m in graph.modules if not m.endswith(".__init__")}
    assert _cycles(graph, modules) == []


def test_the_cycle_finder_finds_a_planted_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc import b\n")
    (pkg / "b.py").write_text("def f():\n    from cyc import a\n")
    (pkg / "c.py").write_text("from cyc import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyc", cache_dir=None)
    assert _cycles(graph, {"cyc.a", "cyc.b", "cyc.c"}) == [["cyc.a", "cyc.b"]]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted(AGENT.glob("*.py")), ids=lambda p: p.name)
def test_the_pod_agent_uses_the_standard_library_only(path):
    """Everything in services/pod/agent runs on a pod that has python3 and nothing else: it imports the
    standard library, its siblings (by bare name, as they sit side by side on the pod) and, optionally,
    pynvml / psutil / zstandard."""
    siblings = {p.stem for p in AGENT.glob("*.py")}
    third_party = _imports(path) - set(sys.stdlib_module_names) - siblings - OPTIONAL_ON_POD
    assert third_party == set(), f"{path.name} needs {sorted(third_party)} on the pod"


def test_heavy_libraries_are_not_imported_at_startup():
    code = (
        "import sys, app.cli, app.tui; "
        "print(','.join(sorted(m for m in ('boto3','wandb','asyncssh','httpx') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


ARCHITECTURE = REPO / "docs" / "architecture.md"


def documented_modules(text: str) -> set[str]:
    """The modules docs/architecture.md's "## Modules" section lists: ``- `name.py` — ...`` under ``### dir/``."""
    section = text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    found: set[str] = set()
    folder = None
    for line in section.splitlines():
        if m := re.fullmatch(r"### (\S+/)", line.strip()):
            folder = m.group(1)
        elif (m := re.match(r"- `([\w.]+\.py)`", line)) and folder is not None:
            found.add(folder + m.group(1))
    return found


def test_the_architecture_doc_lists_every_module():
    on_disk = {
        p.relative_to(REPO).as_posix()
        for name in ("app", "services", "widgets")
        for p in (REPO / name).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    listed = documented_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    assert sorted(on_disk - listed) == [], "modules missing from docs/architecture.md's module list"
    assert sorted(listed - on_disk) == [], "docs/architecture.md lists modules that are gone"


def test_the_module_list_reader_sees_a_missing_module():
    text = (
        "## Intro\n- `before.py`\n\n## Modules\n\n### app/\n- `cli.py` — x\n- `tui.py` — y\n\n"
        "### services/pod/\n- `ssh.py` — z\n\n## Next\n- `after.py`"
    )
    assert documented_modules(text) == {"app/cli.py", "app/tui.py", "services/pod/ssh.py"}


def test_the_architecture_doc_lists_the_layers_of_the_contract():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["id"] == "domains-layered")
    block = ARCHITECTURE.read_text(encoding="utf-8").split("in this order", 1)[1].split("```", 2)[1]
    assert [" ".join(line.split()) for line in block.splitlines() if line.strip()] == layers
