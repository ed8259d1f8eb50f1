"""services.connect.open_connection: the one connection factory every front-end uses (the TUI, the headless
commands, the watcher, the monitor), and its one rule for the simulated pod."""

from __future__ import annotations

from pathlib import Path

from services.connect import open_connection
from services.demo.connection import DemoConnection, DemoOptions
from services.demo.pod import sandbox_paths, sandbox_root
from services.models import Pod, PodKind
from services.pod.local import LocalConnection
from services.pod.ssh import SSHConnection, SSHOptions


def test_an_ssh_pod_gets_ssh_with_the_options_given():
    pod = Pod(name="gpu", kind=PodKind.SSH, host="10.0.0.1", user="root")
    conn = open_connection(pod, sandbox="/nowhere", demo=DemoOptions(), ssh_options=SSHOptions(keepalive_interval=7))
    assert type(conn) is SSHConnection and conn.pod == pod
    assert conn.options.keepalive_interval == 7


def test_this_machine_gets_a_local_connection_whatever_the_demo_inputs():
    pod = Pod(name="local", kind=PodKind.LOCAL)
    assert type(open_connection(pod)) is LocalConnection
    assert type(open_connection(pod, sandbox="/nowhere", demo=DemoOptions())) is LocalConnection


def test_a_demo_pod_that_carries_its_sandbox_stays_in_it(tmp_path: Path):
    pod = Pod(name="demo", kind=PodKind.DEMO, **sandbox_paths(tmp_path / "mine"))
    for conn in (open_connection(pod), open_connection(pod, sandbox=tmp_path / "other", demo=DemoOptions(gpus=2))):
        assert isinstance(conn, DemoConnection) and conn.root == tmp_path / "mine" and conn.pod == pod


def test_a_demo_pod_without_one_is_put_in_the_sandbox_given(tmp_path: Path):
    conn = open_connection(Pod(name="demo", kind=PodKind.DEMO), sandbox=tmp_path / "demo-pod")
    assert isinstance(conn, DemoConnection) and conn.root == (tmp_path / "demo-pod").absolute()
    assert sandbox_root(conn.pod) == conn.root  # its run dir and state dir are the sandbox's


def test_a_demo_pod_with_options_only_is_a_standalone_simulated_pod():
    conn = open_connection(Pod(name="demo", kind=PodKind.DEMO), demo=DemoOptions(gpus=2))
    assert isinstance(conn, DemoConnection) and conn.root is None  # a temp pod its connect() starts


def test_a_demo_pod_with_nothing_given_is_this_machine():
    conn = open_connection(Pod(name="demo", kind=PodKind.DEMO))
    assert type(conn) is LocalConnection
