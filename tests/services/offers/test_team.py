"""Prime Intellect's team (PRIME_TEAM_ID, else ``team_id`` of ~/.prime/config.json, as Prime's CLI and SkyPilot
read it) goes into the create request as the body's ``team: {teamId}``, sent to the provider cloud stub over
real HTTP. Before, the team was never read: a user of a team account rented on their personal account."""

from __future__ import annotations

import json
from pathlib import Path

from services.offers.keys import find_teams
from tests.services.offers.cloud_stub import cloud, providers
from tests.services.offers.test_launch import prime_offer


def prime_home(tmp_path: Path, config: object) -> Path:
    (tmp_path / ".prime").mkdir()
    (tmp_path / ".prime" / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_the_team_comes_from_the_environment_then_the_cli_config(tmp_path: Path):
    home = prime_home(tmp_path, {"api_key": "pk-file-123456", "team_id": "team-from-file"})
    assert find_teams(env={}, home=home) == {"primeintellect": "team-from-file"}
    assert find_teams(env={"PRIME_TEAM_ID": " team-env "}, home=home) == {"primeintellect": "team-env"}
    (home / ".prime" / "config.json").write_text(json.dumps({"api_key": "k", "team_id": None}))  # `prime` writes null
    assert find_teams(env={}, home=home) == {}
    (home / ".prime" / "config.json").write_text("{not json")
    assert find_teams(env={}, home=home) == {}


async def test_the_create_request_carries_the_team(tmp_path: Path):
    home = prime_home(tmp_path, {"api_key": "pk-file-123456", "team_id": "team-synthetic-0001"})
    with cloud() as (c, base):
        async with providers(base, teams=find_teams(env={}, home=home)) as p:
            pod_id = await p.create(prime_offer(), name="ptt-team", max_price=19.72)
        async with providers(base) as p:  # no team: the user's own account, no team key at all
            await p.create(prime_offer(), name="ptt-own", max_price=19.72)
    assert pod_id == "pod-synthetic-0001"
    sent = [body for method, path, body in c.bodies if (method, path) == ("POST", "/pi/api/v1/pods/")]
    assert len(sent) == 2
    assert sent[0]["team"] == {"teamId": "team-synthetic-0001"} and sent[0]["pod"]["maxPrice"] == 19.72
    assert "team" not in sent[1] and sent[1]["pod"]["name"] == "ptt-own"
