"""Fixtures of the pod tests."""

from __future__ import annotations

import pytest

from tests.services.pod.probe_support import Probe


@pytest.fixture
def start_probe():
    """Start probes (``start(args, env)``); each is killed at the end of the test."""
    started: list[Probe] = []

    def start(args: list[str], env: dict[str, str]) -> Probe:
        p = Probe(args, env)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()
