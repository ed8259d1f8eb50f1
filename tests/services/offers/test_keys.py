"""Provider keys and URLs from the environment, the providers' CLI files and settings; the offers cache."""

from __future__ import annotations

import json
from pathlib import Path

from services.offers import cache
from services.offers.keys import find_keys, find_urls, how_to_set, masked_key
from services.offers.models import FetchResult, Offer
from services.offers.settings import OfferSettings


def test_keys_come_from_env_then_cli_files_then_settings(tmp_path: Path):
    home = tmp_path
    (home / ".prime").mkdir()
    (home / ".prime" / "config.json").write_text(json.dumps({"api_key": "prime-file-key-123", "team_id": None}))
    (home / ".config" / "vastai").mkdir(parents=True)
    (home / ".config" / "vastai" / "vast_api_key").write_text("vast-file-key-4567\n")
    settings = OfferSettings.from_table({"keys": {"lambda": "lambda-settings-key-89", "vast": "vast-settings-key"}})
    keys = find_keys(env={"PRIME_API_KEY": "prime-env-key-000"}, home=home, settings=settings)
    assert {n: (k.key, k.source) for n, k in keys.items()} == {
        "primeintellect": ("prime-env-key-000", "PRIME_API_KEY"),
        "vast": ("vast-file-key-4567", "~/.config/vastai/vast_api_key"),
        "lambda": ("lambda-settings-key-89", "settings.toml"),
    }
    keys = find_keys(env={}, home=home, settings=None)
    assert keys["primeintellect"].source == "~/.prime/config.json" and "lambda" not in keys
    assert "prime-file-key-123" not in repr(keys) and "prime-file-key-123" not in keys["primeintellect"].masked


def test_broken_cli_files_are_ignored(tmp_path: Path):
    (tmp_path / ".prime").mkdir()
    (tmp_path / ".prime" / "config.json").write_text("{not json")
    (tmp_path / ".vast_api_key").write_bytes(b"")
    assert find_keys(env={}, home=tmp_path, settings=OfferSettings.from_table({"keys": "oops"})) == {}


def test_urls_env_over_settings_over_defaults():
    urls = find_urls(
        env={"PRIME_TRAIN_TUI_VAST_URL": "http://proxy/vast/"},
        settings=OfferSettings.from_table({"prime_url": "http://s/prime", "vast_url": "http://ignored"}),
    )
    assert urls["vast"] == "http://proxy/vast" and urls["primeintellect"] == "http://s/prime"
    assert urls["lambda"] == "https://cloud.lambdalabs.com/api/v1"


def test_messages_say_how_to_set_a_key_and_mask():
    assert "VAST_API_KEY" in how_to_set("vast") and "vastai set api-key" in how_to_set("vast")
    assert masked_key("short") == "****" and masked_key("abcdefghijklmnop") == "abc…op"


def test_cache_round_trip_ttl_and_corruption(tmp_path: Path):
    offer = Offer(
        "primeintellect", "x1", "H100", "H100_80GB", 8, 80.0, 17.92, params={"cloudId": "c", "socket": "SXM5"}
    )
    cache.save(tmp_path, False, FetchResult((offer,)), now=1000.0)
    got = cache.load(tmp_path, False, now=1100.0, ttl=600)
    assert got is not None and got[1] == 100.0 and got[0].offers == (offer,)
    assert got[0].offers[0].params == {"cloudId": "c", "socket": "SXM5"}
    assert cache.load(tmp_path, False, now=2000.0, ttl=600) is None  # stale
    assert cache.load(tmp_path, True, now=1100.0) is None  # spot is another search
    cache.cache_path(tmp_path, False).write_text('{"version": 1, "fetched_at": 1000, "offers": [{"bad": 1}]}')
    assert cache.load(tmp_path, False, now=1100.0) is None


def test_calibration_uses_this_users_measured_rate_for_the_same_model(tmp_path: Path):
    from services.offers.calibration import ObservationLog, observation
    from services.offers.ranking import RunSpec, rank

    log = ObservationLog(tmp_path / "throughput.jsonl")
    ob = observation("Qwen/Qwen3-0.6B", ["NVIDIA H100 80GB HBM3"] * 8, 80, 100.0, 256 * 2048)
    assert ob is not None and (ob.gpu_type, ob.gpu_count) == ("H100", 8)
    assert log.record(ob, now=0) and not log.record(ob, now=10)  # at most once per 10 min
    with open(tmp_path / "throughput.jsonl", "a") as fh:
        fh.write("garbage\n{}\n")
    assert log.load() == [ob]
    offer = Offer("primeintellect", "x", "H100", "H100_80GB", 8, 80.0, 20.0)
    run = RunSpec(model="Qwen/Qwen3-0.6B", steps=500, train_tokens_per_step=256 * 2048)
    (modelled,) = rank([offer], run)
    (measured,) = rank([offer], run, observed=log.load())
    assert not modelled.measured and measured.measured
    assert measured.est_hours == 5.0 and measured.est_cost == 100.0  # 500 steps at 100 steps/hr
    half = RunSpec(model="Qwen/Qwen3-0.6B", steps=500, train_tokens_per_step=128 * 2048)
    assert rank([offer], half, observed=log.load())[0].est_hours == 2.5  # half the tokens per step
    other = RunSpec(model="Qwen/Qwen3-8B")
    assert not rank([offer], other, observed=log.load())[0].measured  # another model: the model's estimate
    assert observation(None, ["H100"], 80, 100, 1) is None and observation("m", [], 80, 100, 1) is None
