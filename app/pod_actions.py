"""The pods in the sidebar: add, remove, reconnect, select, terminate a rented one, adopt one rented here, and
the writes to pods.toml (one at a time, off the event loop). A mixin of PrimeTrainApp (app/tui.py): it uses
the App's ``pods``, ``snapshots``, ``monitor``, ``pod_list``, ``lifecycle_bg``, ``auto_backup`` and ``rentals``.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import partial
from typing import Any

from app.screens import fleet_shown
from app.screens.add_pod import AddPodScreen
from app.screens.confirm import ConfirmScreen
from app.settings import add_saved_pod, remove_saved_pod
from services.errors import PrimeTrainError
from services.models import Pod, PodKind
from services.pod.specs import parse_pod_spec


class PodActions:
    pods: Any
    snapshots: Any
    monitor: Any
    pods_path: Any
    pod_list: Any
    _lifecycle_bg: Any
    _auto_backup: Any
    rentals: Any
    screen: Any
    selected: Any
    sub_title: Any
    _pending: Any
    _toasted: Any
    _pods_file_lock: Any
    notify: Any
    push_screen: Any
    run_worker: Any

    def action_select_pod(self, step: int) -> None:
        names = list(self.pods)
        if not names:
            return
        at = names.index(self.selected) if self.selected in names else -1
        self.pod_list.select(names[(at + step) % len(names)])

    def action_add_pod(self) -> None:
        self.push_screen(AddPodScreen(), self._add_spec)

    def _add_spec(self, spec: str | None) -> None:
        if not spec:
            return
        try:
            pod = parse_pod_spec(spec)
        except PrimeTrainError as err:
            self.notify(str(err), severity="error", title="Cannot add pod")
            return
        if pod.name in self.pods:
            self.notify(f"A pod named {pod.name} is already in the list.", severity="error")
            return
        if pod.kind is PodKind.SSH:
            pod = replace(pod, saved=True)
            self.run_worker(self._save_pods(add=pod), name="saving pods.toml", exit_on_error=False)
        self._start(pod)
        self.pod_list.select(pod.name)

    def action_remove_pod(self) -> None:
        name = self.selected
        if name is None:
            return
        where = "It will be removed from pods.toml." if self.pods[name].saved else "It is not in pods.toml."
        self.push_screen(ConfirmScreen(f"Remove pod {name}? {where}"), partial(self._remove_confirmed, name))

    def _remove_confirmed(self, name: str, yes: bool | None) -> None:
        if yes:
            self.forget_pod(name)

    def forget_pod(self, name: str) -> None:
        """Stop watching a pod and drop it from the sidebar and pods.toml (which keeps a .bak)."""
        pod = self.pods.pop(name, None)
        if self._lifecycle_bg is not None:  # else nothing watches the pod yet
            self._lifecycle_bg.remove(name)
            self._auto_backup.remove(name)
        if pod is None:
            return
        self.snapshots.pop(name, None)
        self._pending.pop(name, None)
        self._toasted.pop(name, None)
        if (fleet := fleet_shown(self.screen)) is not None:
            fleet.remove_pod(name)
        self.pod_list.remove_pod(name)
        self.sub_title = "SIMULATED" if any(p.simulated for p in self.pods.values()) else ""
        if self.monitor is not None:
            self.run_worker(self.monitor.remove(name), name=f"removing {name}", exit_on_error=False)
        if pod.saved:
            self.run_worker(self._save_pods(remove=name), name="saving pods.toml", exit_on_error=False)

    def adopt_pod(self, pod: Pod) -> None:
        """A pod rented a moment ago: into the sidebar, pods.toml, and selected."""
        if pod.name in self.pods:
            self.forget_pod(pod.name)
        self._start(pod)
        self.run_worker(self._save_pods(add=pod), name="saving pods.toml", exit_on_error=False)
        self.pod_list.select(pod.name)

    def move_deadline(self, name: str, deadline: float | None) -> None:
        """A rented pod's deadline moved (kept at start-up): the sidebar's countdown and pods.toml follow."""
        pod = self.pods.get(name)
        if pod is None:
            return
        pod = self.pods[name] = replace(pod, deadline=deadline)
        if (row := self.pod_list.row(name)) is not None:
            row.pod = pod
        if pod.saved:
            self.run_worker(self._save_pods(add=pod), name="saving pods.toml", exit_on_error=False)

    def action_terminate_pod(self) -> None:
        pod = self._selected_pod()
        if pod is None:
            return
        snap = self.snapshots.get(pod.name)
        latest = snap.latest if snap is not None else None
        ckpts = len(latest.ckpts) if latest is not None else 0
        note = f", including {ckpts} checkpoint(s) — back them up first (Checkpoints, b)" if ckpts else ""
        self.rentals.terminate(pod, note)

    def _selected_pod(self) -> Pod | None:
        return self.pods.get(self.selected or "")

    def action_reconnect(self) -> None:
        name = self.selected
        if name is not None and self.monitor is not None:
            self.monitor.reconnect(name)
            self.notify(f"Reconnecting {name}…")

    def _start(self, pod: Pod) -> None:
        """A pod into the sidebar and watched."""
        self._list_pod(pod)
        if self._lifecycle_bg is None:
            self._start_watching()  # every pod listed so far, this one included
        else:
            self._watch(pod)

    def _list_pod(self, pod: Pod) -> None:
        self.pods[pod.name] = pod
        self.pod_list.add_pod(pod)
        self.sub_title = "SIMULATED" if any(p.simulated for p in self.pods.values()) else ""

    def _start_watching(self) -> None:
        """What watches the pods, started once: the lifecycle's background work (cleanup daemons, preemption
        tracker, the demo pod's sandbox), auto-backup, the monitor on every pod listed, the rentals' checks. The
        App calls it just after its first frame: the first screen no longer waits for its imports and the demo
        sandbox's set-up (~15 ms), and no snapshot or rental event can come before the tracker is there."""
        if self._lifecycle_bg is not None or self.monitor is None:  # started, or the App not mounted yet
            return
        from app.auto_backup import AutoBackup
        from app.lifecycle_bg import BackgroundLifecycle  # cleanup daemons + preemption tracker

        self._lifecycle_bg = BackgroundLifecycle(self)
        self._auto_backup = AutoBackup(self)  # fed every snapshot of every pod, whatever is on screen
        for pod in list(self.pods.values()):
            self._watch(pod)
        self.rentals.start()

    def _watch(self, pod: Pod) -> None:
        prepared = self._lifecycle_bg.prepare_pod(pod)  # the demo pod: its sandbox and run (app/demo.py)
        if prepared is not pod:
            self.pods[pod.name] = prepared
            if (row := self.pod_list.row(pod.name)) is not None:
                row.pod = prepared
        self._lifecycle_bg.add(prepared)
        if self.monitor is not None:
            try:
                self.monitor.add(prepared)
            except ValueError as err:  # still being removed from a moment ago
                self.notify(str(err), severity="error")

    async def _save_pods(self, *, add: Pod | None = None, remove: str | None = None) -> None:
        """Change one entry of pods.toml (off the event loop; one write at a time)."""
        async with self._pods_file_lock:
            if add is not None:
                await asyncio.to_thread(add_saved_pod, add, self.pods_path)
            if remove is not None:
                await asyncio.to_thread(remove_saved_pod, remove, self.pods_path)
