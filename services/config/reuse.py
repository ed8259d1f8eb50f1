"""What the editor's validation keeps from one keystroke to the next, so that a keystroke costs what it
changed, not what the file holds.

- Positions are looked up last: while the checks run, a finding's line is a placeholder naming the key
  path it points at (a negative number, see :meth:`ReuseCache.placeholder`), so findings can be kept
  and given again after lines above them moved; :func:`place` turns placeholders into lines.
- The schema walk keeps each table's findings, keyed on the table's identity and path (the
  incremental parser gives an unchanged table back as the same object; the cache holds the table, so
  its id is not reused while the entry lives).
- The cross-table rules (``checks.cross_checks``, the gotchas, prime-rl's ported validators) read many
  tables, the train and eval sources inside arrays of tables too; they re-run only when that view of the
  document (:meth:`ReuseCache.outline`, built per table and kept by identity) changed. The gotcha that
  reads inside each train source re-runs per source that changed.

Entries live for two validations (the one that made or used them and the next), so memory follows
the document, not the editing session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.config.findings import Finding

_MAX_PATHS = 50_000  # placeholders named so far; past this the cache starts over


class ReuseCache:
    def __init__(self) -> None:
        self._paths: list[tuple] = []
        self._path_ids: dict[tuple, int] = {}
        self._walks: dict[tuple, tuple] = {}
        self._old_walks: dict[tuple, tuple] = {}
        self._outlines: dict[int, tuple] = {}
        self._old_outlines: dict[int, tuple] = {}
        self._rules: list[tuple] = []  # (key, findings) of the cross-table rules, newest last
        self._sources: dict[tuple, tuple] = {}
        self._old_sources: dict[tuple, tuple] = {}

    def begin(self) -> None:
        """A new text is being validated: what the one before last made and nobody used since goes."""
        if len(self._paths) > _MAX_PATHS:
            self.__init__()  # type: ignore[misc]
            return
        self._old_walks, self._walks = self._walks, {}
        self._old_outlines, self._outlines = self._outlines, {}
        self._old_sources, self._sources = self._sources, {}
        del self._rules[:-4]

    # ------------------------------------------------------------------ placeholders

    def placeholder(self, path: tuple) -> tuple[int, int]:
        """A position standing for ``path``'s, filled in by :func:`place`."""
        n = self._path_ids.get(path)
        if n is None:
            n = self._path_ids[path] = len(self._paths)
            self._paths.append(path)
        return (-n - 1, 0)

    def path_of(self, line: int) -> tuple:
        return self._paths[-line - 1]

    # ------------------------------------------------------------------ schema walk

    def walk_get(self, key: tuple, table: Any) -> list[Finding] | None:
        hit = self._walks.get(key) or self._old_walks.get(key)
        if hit is None or hit[0] is not table:
            return None
        self._walks[key] = hit
        return hit[1]

    def walk_put(self, key: tuple, table: Any, findings: list[Finding]) -> None:
        self._walks[key] = (table, findings)

    # ------------------------------------------------------------------ cross-table rules

    def outline(self, node: Any) -> Any:
        """``node`` as the cross-table rules see it: tables, arrays and values in full; a table's outline is
        kept by its identity (an unchanged table costs a lookup)."""
        if isinstance(node, dict):
            kept = self._outlines.get(id(node)) or self._old_outlines.get(id(node))
            if kept is not None and kept[0] is node:
                self._outlines[id(node)] = kept
                return kept[1]
            out: Any = tuple((k, self.outline(v)) for k, v in node.items())
            self._outlines[id(node)] = (node, out)
            return out
        if isinstance(node, list):  # arrays of tables in full: the cross-table rules read inside the sources
            return ("array", tuple(self.outline(v) for v in node))
        if isinstance(node, float):  # -0.0 == 0.0 and nan != nan: compare what the messages would show
            return (float, repr(node))
        return (node.__class__, node)

    def rules(self, key: Any, run: Callable[[], list[Finding]]) -> list[Finding]:
        for kept_key, findings in reversed(self._rules):
            if kept_key == key:
                return findings
        findings = run()
        self._rules.append((key, findings))
        return findings

    def source(self, key: tuple, src: Any, run: Callable[[], list[Finding]]) -> list[Finding]:
        hit = self._sources.get(key) or self._old_sources.get(key)
        if hit is None or hit[0] is not src:
            hit = (src, run())
        self._sources[key] = hit
        return hit[1]


def place(findings: list[Finding], cache: ReuseCache, pos: Callable[[tuple], tuple[int, int]]) -> list[Finding]:
    """The findings with their placeholders turned into lines and columns."""
    out = []
    for f in findings:
        if f.line < 0:
            line, column = pos(cache.path_of(f.line))
            f = Finding(f.id, f.severity, line, column, f.message, f.fix, f.source, f.path, f.edit)
        out.append(f)
    return out
