"""The host-key flow end to end: real sshd, real monitor, the modal driven by Pilot."""

from __future__ import annotations

import pytest

from app.screens.host_key import HostKeyChangedScreen, HostKeyScreen
from app.tui import PrimeTrainApp
from services.models import PodState
from services.monitor.worker import MonitorSettings
from tests.app.helpers import laid_out, wait_for

pytestmark = pytest.mark.ssh
FAST = MonitorSettings(interval=0.2, stale_after=2.0, backoff_max=2.0)


async def wait_until(pilot, predicate) -> None:
    await wait_for(pilot, predicate, timeout=30.0)


async def test_new_pod_key_is_trusted_only_after_yes_then_streams(sshd, client_home, tmp_path):
    pod = sshd.pod(probe_dir=str(tmp_path / "pc"))
    app = PrimeTrainApp([pod], settings=FAST)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(
            pilot,
            lambda: (
                isinstance(app.screen, HostKeyScreen)
                and app.screen.query(".dialog-question")
                and app.screen.query("#trust")
            ),
        )
        text = str(app.screen.query_one(".dialog-question").render())
        fingerprint = app.snapshots[pod.name].status.host_key.fingerprint
        assert fingerprint in text and f"127.0.0.1:{sshd.port}" in text
        assert not client_home.known_hosts.exists()
        # a button that exists may not be laid out yet: Pilot would click at (0, 0) and miss it
        await laid_out(pilot, "#trust")
        await pilot.click("#trust")
        await wait_until(pilot, lambda: not isinstance(app.screen, HostKeyScreen))
        await wait_until(pilot, lambda: client_home.known_hosts.exists())
        await wait_until(pilot, lambda: app.snapshots[pod.name].samples_total >= 1)
        assert app.snapshots[pod.name].status.state is PodState.ONLINE
    assert client_home.known_hosts.read_text().strip() == sshd.known_hosts_line


async def test_cancel_leaves_the_pod_untrusted(sshd, client_home, tmp_path):
    pod = sshd.pod(probe_dir=str(tmp_path / "pc"))
    app = PrimeTrainApp([pod], settings=FAST)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HostKeyScreen) and app.screen.query("#cancel"))
        await pilot.press("escape")
        await pilot.pause(0.5)
        assert app.snapshots[pod.name].status.state is PodState.HOSTKEY_UNKNOWN
        assert app.snapshots[pod.name].samples_total == 0
    assert not client_home.known_hosts.exists()


async def test_changed_key_shows_the_warning_and_never_connects(sshd, client_home, tmp_path):
    client_home.known_hosts.write_text(
        f"[127.0.0.1]:{sshd.port} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    )
    before = client_home.known_hosts.read_text()
    pod = sshd.pod()
    app = PrimeTrainApp([pod], settings=FAST)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HostKeyChangedScreen) and app.screen.query("Button"))
        assert not app.screen.query("#trust")
        assert app.snapshots[pod.name].status.state is PodState.HOSTKEY_CHANGED
    assert client_home.known_hosts.read_text() == before
