"""Regenerate services/config/prime_rl_fields.json from prime-rl's own config models.

prime-rl ships its config models as a GPU-free package (``packages/prime-rl-configs``: pydantic
models, no torch). This script installs that package from a prime-rl checkout into a throwaway
virtual environment, imports the entry-point models and writes every field they accept: its dotted
path, type, default, bounds, description and discriminated unions. Our hand-curated
``schema.toml`` (renames, gotchas, custom types) is never rewritten; the test
``tests/services/config/test_schema_follows_prime_rl.py`` compares it with the generated file.

Usage, after a prime-rl release (see docs/config.md, "Keeping up with prime-rl"):

    .venv/bin/python scripts/update_schema.py ~/src/prime-rl
    .venv/bin/python scripts/update_schema.py --git-dir prime-rl/.git --commit v0.9.0
    .venv/bin/python scripts/update_schema.py ~/src/prime-rl --venv /tmp/prl-venv   # reuse a venv

The package needs Python 3.12 (``--python`` picks the interpreter; default: the first python3.12
on PATH). The same file, run as ``python update_schema.py --dump`` inside that venv, prints the
introspected fields as JSON: that half imports pydantic and prime-rl, the other half only the
standard library.
"""

from __future__ import annotations

import argparse
import enum
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

PACKAGE_DIR = "packages/prime-rl-configs"
OUTPUT = Path(__file__).resolve().parent.parent / "services" / "config" / "prime_rl_fields.json"
# entry point (our validate --kind) -> (module, model)
ENTRYPOINTS = {
    "rl": ("prime_rl.configs.rl", "RLConfig"),
    "trainer": ("prime_rl.configs.trainer", "TrainerConfig"),
    "orchestrator": ("prime_rl.configs.orchestrator", "OrchestratorConfig"),
    "inference": ("prime_rl.configs.inference", "InferenceConfig"),
    "sft": ("prime_rl.configs.sft", "SFTConfig"),
    "evals": ("prime_rl.configs.evals", "EvalsConfig"),
}


# ---------------------------------------------------------------- introspection (runs in the venv)


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        if isinstance(value, float) and value != value:  # NaN has no JSON spelling
            return "nan"
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            return str(value)
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    return repr(value)


class _Introspector:
    def __init__(self) -> None:
        import annotated_types
        import pydantic
        from pydantic.fields import FieldInfo
        from pydantic_core import PydanticUndefined

        self.BaseModel = pydantic.BaseModel
        self.FieldInfo = FieldInfo
        self.undefined = PydanticUndefined
        self.bound_types = {
            annotated_types.Ge: "ge",
            annotated_types.Gt: "gt",
            annotated_types.Le: "le",
            annotated_types.Lt: "lt",
        }
        self.fields: dict[str, dict[str, Any]] = {}
        self._docs: dict[type, dict[str, str]] = {}

    # a type annotation -> {"types": set, "choices", bounds, "models": [(model, variant)], "union", ...}
    def describe(self, ann: Any, out: dict[str, Any], metadata: list[Any]) -> None:
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            base, *extra = typing.get_args(ann)
            for item in extra:
                if isinstance(item, self.FieldInfo):
                    metadata.extend(item.metadata)
                    if isinstance(item.discriminator, str):
                        out["tag"] = item.discriminator
                else:
                    metadata.append(item)
            self.describe(base, out, metadata)
            return
        if isinstance(ann, typing.TypeAliasType if hasattr(typing, "TypeAliasType") else ()):
            self.describe(ann.__value__, out, metadata)
            return
        if origin in (typing.Union, types.UnionType):
            for arg in typing.get_args(ann):
                self.describe(arg, out, metadata)
            return
        if ann is type(None):
            out["types"].add("none")
        elif origin is typing.Literal:
            for value in typing.get_args(ann):
                out["choices"].append(_jsonable(value))
            out["types"].add("choice")
        elif isinstance(ann, type) and issubclass(ann, enum.Enum):
            out["choices"].extend(_jsonable(m.value) for m in ann)
            out["types"].add("choice")
        elif isinstance(ann, type) and issubclass(ann, self.BaseModel):
            out["types"].add("table")
            out["models"].append(ann)
        elif origin in (list, tuple, set, frozenset, typing.Sequence) or ann in (list, tuple, set):
            args = [a for a in typing.get_args(ann) if a is not Ellipsis]
            inner = {"types": set(), "choices": [], "models": []}
            for arg in args:
                self.describe(arg, inner, [])
            if inner["models"] and inner["types"] <= {"table"}:
                out["types"].add("tables")
                out["models"].extend(inner["models"])
                out["tag"] = out.get("tag") or inner.get("tag")
            else:
                out["types"].add("list")
                if inner["types"]:
                    out["items"] = sorted(inner["types"])
        elif origin in (dict, typing.Mapping) or ann is dict:
            args = typing.get_args(ann)
            out["types"].add("dict")
            if len(args) == 2:
                inner = {"types": set(), "choices": [], "models": []}
                self.describe(args[1], inner, [])
                out["values"] = sorted(inner["types"])
        elif ann is bool:
            out["types"].add("bool")
        elif ann is int:
            out["types"].add("int")
        elif ann is float:
            out["types"].add("float")
        elif ann is str:
            out["types"].add("str")
        elif isinstance(ann, type) and issubclass(ann, os.PathLike):
            out["types"].add("path")
        elif ann is typing.Any or ann is object:
            out["types"].add("any")
        else:
            out["types"].add(getattr(ann, "__name__", None) or repr(ann))

    def docstrings(self, model: type) -> dict[str, str]:
        """prime-rl documents a field with the string literal below it (an attribute docstring), which
        pydantic keeps only when a model asks for it: read them from the source, base classes first."""
        import ast
        import inspect
        import textwrap

        docs: dict[str, str] = {}
        for cls in reversed(model.__mro__):
            if not issubclass(cls, self.BaseModel) or cls.__module__.startswith("pydantic"):
                continue
            if cls not in self._docs:  # inspect.getsource parses the whole module: once per class
                own: dict[str, str] = {}
                try:
                    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
                except (OSError, TypeError, SyntaxError):
                    tree = ast.Module(body=[], type_ignores=[])
                body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
                for stmt, after in zip(body, body[1:]):
                    if (
                        isinstance(stmt, ast.AnnAssign)
                        and isinstance(stmt.target, ast.Name)
                        and isinstance(after, ast.Expr)
                        and isinstance(after.value, ast.Constant)
                        and isinstance(after.value.value, str)
                    ):
                        own[stmt.target.id] = inspect.cleandoc(after.value.value)
                self._docs[cls] = own
            docs.update(self._docs[cls])
        return docs

    def walk(self, path: str, model: type, stack: tuple[type, ...], variant_of: tuple[str, str] | None) -> None:
        for name, info in model.model_fields.items():  # exclude=True only hides a field from dumps
            key, aliases = self._keys(name, info)
            out: dict[str, Any] = {"types": set(), "choices": [], "models": []}
            metadata = list(info.metadata)
            self.describe(info.annotation, out, metadata)
            if isinstance(info.discriminator, str):
                out["tag"] = info.discriminator
            entry: dict[str, Any] = {"type": sorted(out["types"])}
            if out["choices"]:
                entry["choices"] = out["choices"]
            for item in ("items", "values"):
                if item in out:
                    entry[item] = out[item]
            for m in metadata:
                for cls, word in self.bound_types.items():
                    if isinstance(m, cls):
                        entry[word] = _jsonable(getattr(m, word))
            if any(type(m).__name__ in ("BeforeValidator", "PlainValidator", "WrapValidator") for m in metadata):
                entry["coerced"] = True  # a validator converts other input first: the type is what it ends as
            if info.is_required():
                entry["required"] = True
            else:
                default = info.default
                if default is self.undefined and info.default_factory is not None:
                    try:
                        default = info.default_factory()
                    except TypeError:  # a factory that wants the validated data
                        default = self.undefined
                if default is not self.undefined and not isinstance(default, self.BaseModel):
                    entry["default"] = _jsonable(default)
            description = info.description or self.docstrings(model).get(name)
            if description:
                entry["description"] = " ".join(description.split())
            if info.deprecated:
                entry["deprecated"] = True
            if key != name:
                entry["attribute"] = name
            if variant_of:
                entry.setdefault("variants", []).append(variant_of[1])
            models = list(dict.fromkeys(out["models"]))
            tag = out.get("tag") or self._implicit_tag(models)
            variants: dict[str, type] = {}
            if tag and len(models) > 1:
                for m in models:
                    for value in self._tag_values(m, tag):
                        variants[value] = m
                entry["union"] = {"tag": tag, "variants": {v: m.__name__ for v, m in sorted(variants.items())}}
            elif models:
                entry["model"] = " | ".join(m.__name__ for m in models)
            if any(m.model_config.get("extra") == "allow" for m in models):
                entry["extra"] = "allow"
            full = f"{path}.{key}"
            self._merge(full, entry)
            for alias in aliases:  # another spelling prime-rl accepts for the same setting
                self._merge(f"{path}.{alias}", {**entry, "alias_of": key})
            for m in models:
                if m in stack:
                    self.fields[full]["recursive"] = True
                    continue
                sub_variant = None
                if variants:
                    names = [v for v, vm in variants.items() if vm is m]
                    sub_variant = (tag, names[0]) if names else None
                self._walk_variant(full, m, stack + (m,), sub_variant, [v for v, vm in variants.items() if vm is m])

    @staticmethod
    def _keys(name: str, info: Any) -> tuple[str, list[str]]:
        """The key a TOML file uses for a field, and the other spellings (AliasChoices) it accepts."""
        alias = info.validation_alias
        if isinstance(alias, str):
            return alias, []
        choices = [c for c in getattr(alias, "choices", []) if isinstance(c, str)]
        if choices:
            return choices[0], choices[1:]
        return info.alias or name, []

    def _walk_variant(
        self, path: str, model: type, stack: tuple[type, ...], variant_of: tuple[str, str] | None, names: list[str]
    ) -> None:
        if not variant_of or len(names) <= 1:
            self.walk(path, model, stack, variant_of)
            return
        for name in names:  # one model serving several tag values: each is a variant of its own
            self.walk(path, model, stack, (variant_of[0], name))

    def _implicit_tag(self, models: list[type]) -> str | None:
        if len(models) < 2:
            return None
        for candidate in ("type", "id", "kind"):
            if all(self._tag_values(m, candidate) for m in models):
                return candidate
        return None

    def _tag_values(self, model: type, tag: str) -> list[str]:
        info = model.model_fields.get(tag)
        if info is None:
            return []
        out: dict[str, Any] = {"types": set(), "choices": [], "models": []}
        self.describe(info.annotation, out, [])
        if out["choices"]:
            return [str(c) for c in out["choices"]]
        return [str(info.default)] if isinstance(info.default, str) else []

    def _merge(self, path: str, entry: dict[str, Any]) -> None:
        old = self.fields.get(path)
        if old is None:
            self.fields[path] = entry
            return
        # the same key reached through several variants (or models of one union): widen
        if "variants" in old or "variants" in entry:
            if "variants" in old and "variants" in entry:
                old["variants"] = sorted(set(old["variants"]) | set(entry["variants"]))
            else:
                old.pop("variants", None)
        old["type"] = sorted(set(old["type"]) | set(entry["type"]))
        if "choices" in entry:
            old["choices"] = list(dict.fromkeys(old.get("choices", []) + entry["choices"]))
        for k in ("ge", "gt", "le", "lt", "default", "required", "description", "model", "union"):
            if k in entry and k in old and old[k] != entry[k]:
                old.setdefault("differs_by_variant", []).append(k)
            elif k in entry:
                old.setdefault(k, entry[k])
        if "differs_by_variant" in old:
            old["differs_by_variant"] = sorted(set(old["differs_by_variant"]))


def dump() -> dict[str, Any]:
    """Introspect the installed prime-rl-configs (run inside its venv)."""
    import importlib
    import importlib.metadata as md

    intro = _Introspector()
    for kind, (module, name) in ENTRYPOINTS.items():
        model = getattr(importlib.import_module(module), name)
        intro.walk(kind, model, (model,), None)
    for entry in intro.fields.values():
        if "variants" in entry:
            entry["variants"] = sorted(set(entry["variants"]))
    versions = {}
    for dist in ("prime-rl-configs", "pydantic", "prime-pydantic-config", "verifiers"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = None
    return {
        "versions": versions,
        "entrypoints": {k: f"{m}.{n}" for k, (m, n) in ENTRYPOINTS.items()},
        "fields": intro.fields,
    }


# ---------------------------------------------------------------- driver (standard library only)


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, **kw)


def _commit_of(checkout: Path) -> tuple[str, str]:
    try:
        out = _run(["git", "-C", str(checkout), "log", "-1", "--format=%H %cs"], capture_output=True).stdout.split()
        return out[0], out[1]
    except (subprocess.CalledProcessError, FileNotFoundError, IndexError):
        return "unknown", "unknown"


def _export(git_dir: str, commit: str, into: Path) -> tuple[str, str]:
    """Extract packages/prime-rl-configs at ``commit`` of a (possibly bare) git dir."""
    full = _run(
        ["git", "--git-dir", git_dir, "log", "-1", "--format=%H %cs", commit], capture_output=True
    ).stdout.split()
    archive = subprocess.run(
        ["git", "--git-dir", git_dir, "archive", full[0], PACKAGE_DIR], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(into, filter="data") if sys.version_info >= (3, 12) else tar.extractall(into)
    return full[0], full[1]


def _pinned_verifiers(args: argparse.Namespace, work: Path) -> tuple[Path, dict[str, str]] | None:
    """The verifiers prime-rl pins as its deps/verifiers submodule (the env block's models live there;
    PyPI's release may be older or newer): a checked-out submodule, or ``--verifiers-git-dir``."""
    if args.checkout and (args.checkout / "deps" / "verifiers" / "pyproject.toml").is_file():
        return args.checkout / "deps" / "verifiers", {}
    if not args.verifiers_git_dir:
        return None
    if args.git_dir:
        tree = _run(["git", "--git-dir", args.git_dir, "ls-tree", args.commit, "deps/verifiers"], capture_output=True)
    else:
        tree = _run(["git", "-C", str(args.checkout), "ls-tree", "HEAD", "deps/verifiers"], capture_output=True)
    sha = tree.stdout.split()[2]
    into = work / "verifiers"
    archive = subprocess.run(
        ["git", "--git-dir", args.verifiers_git_dir, "archive", sha], check=True, capture_output=True
    ).stdout
    into.mkdir()
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(into, filter="data") if sys.version_info >= (3, 12) else tar.extractall(into)
    # an archive has no git metadata for hatch-vcs: name the version after the nearest tag and the commit
    tag = (
        subprocess.run(
            ["git", "--git-dir", args.verifiers_git_dir, "describe", "--tags", "--abbrev=0", sha],
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .lstrip("v")
        or "0"
    )
    return into, {"SETUPTOOLS_SCM_PRETEND_VERSION": f"{tag}+g{sha[:8]}"}


def _find_python(given: str | None) -> str:
    if given:
        return given
    for name in ("python3.12", "python3"):
        exe = shutil.which(name)
        if exe and subprocess.run([exe, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 12))"]).returncode == 0:
            return exe
    sys.exit("update_schema: prime-rl-configs needs Python 3.12; pass --python /path/to/python3.12")


def _project_version(pyproject: str) -> str | None:
    """prime-rl's own version, from its top-level pyproject.toml."""
    import tomllib

    try:
        return tomllib.loads(pyproject).get("project", {}).get("version")
    except tomllib.TOMLDecodeError:
        return None


def render(data: dict[str, Any], commit: str, date: str, version: str | None = None) -> str:
    """The generated file: a header, then one line per field, sorted (diffs show one line per change)."""
    header = {
        "generated_by": "scripts/update_schema.py",
        "prime_rl_version": version,
        "prime_rl_commit": commit,
        "prime_rl_commit_date": date,
        "package": "prime-rl-configs",
        "package_version": data["versions"].get("prime-rl-configs"),
        "versions": data["versions"],
        "entrypoints": data["entrypoints"],
    }
    lines = ["{", f'"header": {json.dumps(header, sort_keys=True)},', '"fields": {']
    items = sorted(data["fields"].items())
    for i, (path, entry) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        lines.append(f"{json.dumps(path)}: {json.dumps(entry, sort_keys=True, ensure_ascii=False)}{comma}")
    lines += ["}", "}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", nargs="?", type=Path, help="a prime-rl checkout (work tree)")
    parser.add_argument("--git-dir", help="a prime-rl git directory (bare is fine), with --commit")
    parser.add_argument("--commit", default="HEAD", help="commit, tag or branch of --git-dir (default HEAD)")
    parser.add_argument(
        "--verifiers-git-dir",
        help="verifiers' git directory, to install the commit prime-rl pins "
        "(deps/verifiers) when the checkout's submodule is not checked out; else PyPI's release",
    )
    parser.add_argument("--venv", type=Path, help="use (or create) this virtual environment instead of a throwaway one")
    parser.add_argument("--python", help="the Python 3.12 that creates the venv")
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT)
    parser.add_argument("--dump", action="store_true", help=argparse.SUPPRESS)  # inside the venv
    args = parser.parse_args(argv)
    if args.dump:
        json.dump(dump(), sys.stdout)
        return 0
    if bool(args.checkout) == bool(args.git_dir):
        parser.error("give a prime-rl checkout or --git-dir, not both")
    with tempfile.TemporaryDirectory(prefix="prl-schema-") as tmp:
        work = Path(tmp)
        if args.git_dir:
            commit, date = _export(args.git_dir, args.commit, work / "src")
            package = work / "src" / PACKAGE_DIR
            pyproject = subprocess.run(
                ["git", "--git-dir", args.git_dir, "show", f"{commit}:pyproject.toml"], capture_output=True, text=True
            ).stdout
        else:
            package = args.checkout / PACKAGE_DIR
            commit, date = _commit_of(args.checkout)
            top = args.checkout / "pyproject.toml"
            pyproject = top.read_text(encoding="utf-8") if top.is_file() else ""
        if not (package / "pyproject.toml").is_file():
            sys.exit(f"update_schema: {package} is not there: is this a prime-rl checkout?")
        venv = args.venv or work / "venv"
        py = venv / "bin" / "python"
        if not py.exists():
            _run([_find_python(args.python), "-m", "venv", str(venv)])
        pinned = _pinned_verifiers(args, work)
        if not pinned:
            print(
                "note: verifiers comes from PyPI, not the commit prime-rl pins (check out deps/verifiers "
                "or pass --verifiers-git-dir): the environment settings may differ",
                file=sys.stderr,
            )
        if pinned:
            print(f"installing the pinned verifiers ({pinned[0]}) into {venv} ...", file=sys.stderr)
            _run(
                [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(pinned[0])],
                stdout=subprocess.DEVNULL,
                env={**os.environ, **pinned[1]},
            )
        print(f"installing {package.name} into {venv} ...", file=sys.stderr)
        _run(
            [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(package)],
            stdout=subprocess.DEVNULL,
        )
        # run from the temp dir so this repository's own packages cannot shadow prime-rl's
        out = _run([str(py), str(Path(__file__).resolve()), "--dump"], capture_output=True, cwd=tmp).stdout
    data = json.loads(out)
    args.output.write_text(render(data, commit, date, _project_version(pyproject)), encoding="utf-8")
    print(
        f"wrote {args.output} ({len(data['fields'])} fields, prime-rl {commit[:8]}, "
        f"prime-rl-configs {data['versions'].get('prime-rl-configs')})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
