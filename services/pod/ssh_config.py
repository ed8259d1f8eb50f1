"""~/.ssh/config as it applies to a pod: asyncssh's reading of it, and which IdentityFiles exist."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from services.models import Pod


def pod_ssh_config(pod: Pod, kwargs: dict[str, Any]) -> Any:
    """~/.ssh/config as it applies to this pod (asyncssh's reading of it), or None without one."""
    import getpass

    from asyncssh.config import SSHClientConfig

    paths = [p for p in (Path("~/.ssh/config").expanduser(),) if os.access(p, os.R_OK)]
    if not paths:
        return None
    return SSHClientConfig.load(
        None,
        paths,
        False,
        False,
        False,
        getpass.getuser(),
        kwargs.get("username", ()),
        pod.host,
        kwargs.get("port", ()),
    )


def identity_files(config: Any) -> list[str] | None:
    """The config's IdentityFiles that exist, or None when all of them exist (or none is set)."""
    if config is None:
        return None
    files = [str(Path(f).expanduser()) for f in config.get("IdentityFile", ())]
    existing = [f for f in files if os.path.isfile(f)]
    return None if existing == files else existing
