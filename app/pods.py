"""The App's pods, in one place: the pods watched (name -> Pod, in sidebar order), their newest snapshots, the
snapshots waiting for the next frame, the alert ids already toasted, the alert log, and the writes to pods.toml
(one at a time, off the event loop). The App owns one :class:`PodBook`; its controllers read it (``AppHost``)
and ask the App to change it with messages (app/host.py)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, ItemsView, Iterator, Mapping, ValuesView
from pathlib import Path
from typing import Any

from app.settings import add_saved_pod, remove_saved_pod
from services.models import Alert, Pod, PodSnapshot

Spawn = Callable[[Coroutine[Any, Any, None], str], object]  # runs a coroutine as a worker of that name


class PodBook(Mapping[str, Pod]):
    """name -> Pod (a read-only mapping; :meth:`add`, :meth:`forget` and :meth:`replace` change it). ``spawn``
    runs the pods.toml writes; ``on_replaced`` is told of every pod replaced (the sidebar's row follows)."""

    def __init__(self, path: Path | None, spawn: Spawn, on_replaced: Callable[[Pod], None]) -> None:
        self.path = path
        self._spawn, self._on_replaced = spawn, on_replaced
        self._pods: dict[str, Pod] = {}
        self.snapshots: dict[str, PodSnapshot] = {}  # name -> the newest snapshot on screen
        self.pending: dict[str, PodSnapshot] = {}  # name -> the newest snapshot, not on screen yet (next frame)
        self.toasted: dict[str, frozenset[str]] = {}  # name -> alert ids already toasted (while they last)
        self.alert_log: deque[tuple[str, Alert]] = deque(maxlen=500)  # (pod, alert) as they fired
        self._lock = asyncio.Lock()  # one pods.toml write at a time

    def __getitem__(self, name: str) -> Pod:
        return self._pods[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._pods)

    def __len__(self) -> int:
        return len(self._pods)

    def values(self) -> ValuesView[Pod]:
        return self._pods.values()

    def items(self) -> ItemsView[str, Pod]:
        return self._pods.items()

    @property
    def simulated(self) -> bool:
        """A simulated pod is among them (the App's subtitle says so)."""
        return any(p.simulated for p in self._pods.values())

    def add(self, pod: Pod) -> None:
        """A pod listed (a pod of that name is replaced, its place kept)."""
        self._pods[pod.name] = pod

    def forget(self, name: str) -> Pod | None:
        """The pod and everything kept about it gone; None when there was no such pod."""
        pod = self._pods.pop(name, None)
        if pod is not None:
            self.snapshots.pop(name, None)
            self.pending.pop(name, None)
            self.toasted.pop(name, None)
        return pod

    def replace(self, pod: Pod, *, save: bool = True) -> Pod:
        """A listed pod changed (its run dir, its deadline, the demo pod put in its sandbox): the sidebar's row
        follows, and pods.toml for a saved pod unless ``save`` is False."""
        self._pods[pod.name] = pod
        self._on_replaced(pod)
        if save and pod.saved:
            self.save(pod)
        return pod

    def save(self, pod: Pod) -> None:
        """Write the pod's entry of pods.toml (off the event loop, after any write before it)."""
        self._spawn(self._write(add=pod), "saving pods.toml")

    def unsave(self, name: str) -> None:
        """Remove the pod's entry from pods.toml (which keeps a .bak)."""
        self._spawn(self._write(remove=name), "saving pods.toml")

    async def _write(self, *, add: Pod | None = None, remove: str | None = None) -> None:
        async with self._lock:
            if add is not None:
                await asyncio.to_thread(add_saved_pod, add, self.path)
            if remove is not None:
                await asyncio.to_thread(remove_saved_pod, remove, self.path)
