"""The incident corpus: each scenario replayed on a real sshd pod (tests/incidents/harness.py) states the alerts
it must raise, each within its time to detect, and the ones it must not raise; normal operations (a kill, a
finish, a resume, a long checkpoint save, an eval, a slow start) must raise none, in the monitor and in
``status``/``watch --once``. A stall alert after the user's own kill was the reason for this corpus: before the
run-life rules, the kill scenario raised "No training progress" ~11 s after the kill (budget 8 s) and both
command-line front-ends reported it. docs/alerts.md's table comes from here (``python -m tests.incidents.table``).
"""

from __future__ import annotations

import pytest

from tests.incidents.harness import SCENARIOS, Result

# one worker runs the whole corpus (the scenarios run concurrently inside it, on one sshd)
pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("incidents"), pytest.mark.ssh]


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_scenario(corpus: dict[str, Result], name: str) -> None:
    result = corpus[name]
    assert result.onset is not None or result.error, f"{name}: the scenario never reached its onset"
    assert not result.problems(), f"{name}: " + "; ".join(result.problems())
