"""The one way to reach a pod: :func:`open_connection` gives the Connection for any pod, for every front-end
(the TUI, the headless commands, the watcher, the monitor).

It sits above ``services.demo`` (the simulated pod's connection lives there) and below everything that
connects; ``services.pod`` holds the connections themselves. The app passes the demo pod's sandbox in
(``<data dir>/demo-pod``, app/demo.py), so nothing here knows where the app keeps its files.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.models import Pod, PodKind

if TYPE_CHECKING:
    from services.demo.connection import DemoOptions
    from services.pod.connection import Connection
    from services.pod.ssh import SSHOptions


def open_connection(
    pod: Pod,
    *,
    sandbox: Path | str | None = None,
    demo: DemoOptions | None = None,
    ssh_options: SSHOptions | None = None,
    **local_kwargs: Any,
) -> Connection:
    """The pod's connection, not yet connected.

    - an SSH pod: ``SSHConnection(pod, ssh_options)``;
    - this machine: ``LocalConnection(pod, **local_kwargs)``;
    - the simulated pod: a ``DemoConnection`` confined to its sandbox: the one the pod carries, else
      ``sandbox`` (the pod then gets its run and state dirs in it). With neither but ``demo`` options, a
      standalone temp pod the connection runs itself (a monitor used alone). With none of the three it is
      this machine (a simulated pod only ever runs in a sandbox it was given). ``demo`` options are the
      defaults; what a sandbox saved (its demo.json) wins over them.
    """
    if pod.kind is PodKind.SSH:
        from services.pod.ssh import SSHConnection

        return SSHConnection(pod, ssh_options)
    if pod.kind is PodKind.DEMO:
        from services.demo.pod import sandbox_paths, sandbox_root

        if sandbox_root(pod) is None and sandbox is not None:
            paths = sandbox_paths(sandbox)
            pod = replace(pod, run_dir=paths["run_dir"], probe_dir=paths["probe_dir"])
        if sandbox_root(pod) is not None or demo is not None:
            from services.demo.connection import DemoConnection

            return DemoConnection(pod, demo)
    from services.pod.local import LocalConnection

    return LocalConnection(pod, **local_kwargs)
