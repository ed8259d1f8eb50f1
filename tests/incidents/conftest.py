"""The incident corpus, run once per session: every selected scenario at once on one sshd (harness.py)."""

from __future__ import annotations

import pytest

from tests.incidents.harness import Result, run_corpus


@pytest.fixture(scope="session")
def corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    """The results of the scenarios this session's tests ask about (only those run)."""
    names = sorted(
        {
            item.callspec.params["name"]
            for item in request.session.items
            if item.path.parent.name == "incidents" and hasattr(item, "callspec") and "name" in item.callspec.params
        }
    )
    return run_corpus(tmp_path_factory.mktemp("incidents"), names)
