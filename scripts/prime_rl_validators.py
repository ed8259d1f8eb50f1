"""List prime-rl's own config validators and say which ones our checks do not port yet.

prime-rl's config checks are the reference for ours: every ``model_validator`` / ``field_validator``
in its config package (``packages/prime-rl-configs/src/prime_rl``), the helpers there that raise
(``utils/validation.py``'s shared-field propagation) and the ``raise`` checks its entry points run
before they start (``src/prime_rl/entrypoints``). This script finds them with the standard
library's ``ast`` (no pydantic, no install) and prints each with its error message(s).

The committed table ``services/config/validators.toml`` maps each (file, class, function) to the
rule id(s) that port it, ``todo = "..."`` or ``na = "why it needs no port"``. The script prints
which validators are not in the table (new in prime-rl: exit 1) and which are still todo.

Usage (see docs/config.md, "Keeping up with prime-rl"):

    python scripts/prime_rl_validators.py ~/src/prime-rl
    python scripts/prime_rl_validators.py --git-dir prime-rl/.git --commit 559b4477
    python scripts/prime_rl_validators.py --git-dir prime-rl/.git --list     # every validator, with messages
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project runs on 3.10 too
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "services" / "config" / "validators.toml"
FIELDS = ROOT / "services" / "config" / "prime_rl_fields.json"
CONFIG_PACKAGE = "packages/prime-rl-configs/src/prime_rl/"
ENTRYPOINTS = "src/prime_rl/entrypoints/"
VALIDATOR_DECORATORS = {"model_validator", "field_validator"}
MODULE = "(module)"  # the class name of a module-level function in the table


@dataclass
class Validator:
    file: str  # relative to prime_rl/: configs/rl.py, utils/validation.py, entrypoints/sft.py
    cls: str  # MODULE for module-level functions
    function: str
    kind: str  # model_validator, field_validator, raises (a helper), pre-start (an entry point)
    messages: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.file, self.cls, self.function)

    @property
    def cite(self) -> str:
        """How a test names it: ``configs/rl.py::RLConfig.auto_setup_lora``."""
        return f"{self.file}::{self.cls}.{self.function}"


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _text(node: ast.expr | None) -> str:
    """An error message as written: string parts kept, f-string fields as {expr}."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            elif isinstance(part, ast.FormattedValue):
                out.append("{" + ast.unparse(part.value) + "}")
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    return ast.unparse(node)


def _messages(func: ast.AST, asserts: bool) -> list[str]:
    found: list[str] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc
            if isinstance(exc, ast.Call):
                msg = _text(exc.args[0]) if exc.args else _decorator_name(exc)
            else:
                msg = ast.unparse(exc)
            found.append(" ".join(msg.split()))
        elif asserts and isinstance(node, ast.Assert) and node.msg is not None:
            found.append(" ".join(_text(node.msg).split()))
    return found


def _raises(func: ast.AST) -> bool:
    return any(isinstance(n, ast.Raise) and n.exc is not None for n in ast.walk(func))


def scan_source(rel: str, source: str) -> list[Validator]:
    """The validators of one file; ``rel`` is its path under prime_rl/."""
    tree = ast.parse(source)
    found: list[Validator] = []
    entrypoint = rel.startswith("entrypoints/")
    for top in tree.body:
        if isinstance(top, ast.ClassDef) and not entrypoint:
            for item in top.body:
                if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                kinds = {_decorator_name(d) for d in item.decorator_list} & VALIDATOR_DECORATORS
                if kinds:
                    found.append(Validator(rel, top.name, item.name, sorted(kinds)[0], _messages(item, True)))
        elif isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)) and _raises(top):
            # a module-level helper that raises (a validator calls it) or an entry point's pre-start check;
            # `assert`s there are the launcher's own invariants, not checks on the user's config
            found.append(
                Validator(rel, MODULE, top.name, "pre-start" if entrypoint else "raises", _messages(top, asserts=False))
            )
    return found


def _wanted(path: str) -> str | None:
    """The path under prime_rl/ for a file this script reads, else None."""
    if path.endswith(".py") and path.startswith(CONFIG_PACKAGE):
        rel = path[len(CONFIG_PACKAGE) :]
        return rel if rel.startswith(("configs/", "utils/")) else None
    if path.endswith(".py") and path.startswith(ENTRYPOINTS):
        return "entrypoints/" + path[len(ENTRYPOINTS) :]
    return None


def scan_checkout(checkout: Path) -> list[Validator]:
    found: list[Validator] = []
    for path in sorted(checkout.rglob("*.py")):
        rel = _wanted(path.relative_to(checkout).as_posix())
        if rel:
            found += scan_source(rel, path.read_text(encoding="utf-8"))
    return found


def scan_git(git_dir: str, commit: str) -> list[Validator]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True).stdout

    found: list[Validator] = []
    for path in git("ls-tree", "-r", "--name-only", commit).splitlines():
        rel = _wanted(path)
        if rel:
            found += scan_source(rel, git("show", f"{commit}:{path}"))
    return found


def load_table(path: Path = TABLE) -> dict[tuple[str, str, str], dict]:
    """validators.toml as {(file, class, function): {"rules": [...]} | {"todo": ...} | {"na": ...}}."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    table: dict[tuple[str, str, str], dict] = {}
    for file, classes in data.get("validators", {}).items():
        for cls, functions in classes.items():
            for function, entry in functions.items():
                table[(file, cls, function)] = entry
    return table


def report(found: list[Validator], table: dict[tuple[str, str, str], dict]) -> tuple[list[Validator], list[str]]:
    """(validators missing from the table, lines to print)."""
    keys = {v.key for v in found}
    new = [v for v in found if v.key not in table]
    todo = [v for v in found if v.key in table and "todo" in table[v.key]]
    gone = sorted(k for k in table if k not in keys)
    counts = {"ported": 0, "partly": 0, "todo": 0, "na": 0}
    for v in found:
        entry = table.get(v.key, {})
        state = (
            ("partly" if "todo" in entry else "ported")
            if "rules" in entry
            else ("todo" if "todo" in entry else "na" if "na" in entry else "")
        )
        if state:
            counts[state] += 1
    lines = [
        f"{len(found)} validators: {counts['ported']} ported, {counts['partly']} partly ported (rules and "
        f"todo), {counts['todo']} todo, {counts['na']} need no port, {len(new)} new"
    ]
    if new:
        lines.append("\nnew in prime-rl (add them to services/config/validators.toml):")
        for v in new:
            lines.append(f"  {v.cite}  [{v.kind}]")
            lines += [f"      {m}" for m in v.messages]
    if todo:
        lines.append("\nnot ported yet:")
        lines += [f"  {v.cite}: {table[v.key]['todo']}" for v in todo]
    if gone:
        lines.append("\nin the table but no longer in prime-rl (delete them there):")
        lines += [f"  {f}::{c}.{fn}" for f, c, fn in gone]
    return new, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", nargs="?", type=Path, help="a prime-rl checkout (work tree)")
    parser.add_argument("--git-dir", help="a prime-rl git directory (bare is fine)")
    parser.add_argument("--commit", help="with --git-dir: the commit (default: the one prime_rl_fields.json follows)")
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--list", action="store_true", help="print every validator with its messages")
    parser.add_argument("--json", action="store_true", help="print every validator as JSON")
    args = parser.parse_args(argv)
    if bool(args.checkout) == bool(args.git_dir):
        parser.error("give a prime-rl checkout or --git-dir, not both")
    if args.git_dir:
        commit = args.commit or json.loads(FIELDS.read_text(encoding="utf-8"))["header"]["prime_rl_commit"]
        found = scan_git(args.git_dir, commit)
    else:
        found = scan_checkout(args.checkout)
    if args.json:
        json.dump([v.__dict__ for v in found], sys.stdout, indent=1)
        print()
        return 0
    table = load_table(args.table)
    if args.list:
        for v in found:
            entry = table.get(v.key, {})
            state = (
                "ported: " + ", ".join(entry["rules"])
                if "rules" in entry
                else "todo"
                if "todo" in entry
                else "n/a"
                if "na" in entry
                else "NEW"
            )
            print(f"{v.cite}  [{v.kind}] {state}")
            for m in v.messages:
                print(f"    {m}")
    new, lines = report(found, table)
    print("\n".join(lines))
    return 1 if new else 0


if __name__ == "__main__":
    raise SystemExit(main())
