"""Step numbers in bucket keys go through the pod scripts' one strict parser: an odd name is skipped,
never a crash (``"²".isdigit()`` is True but ``int("²")`` raises) and never another step's number."""

import pytest

from services.backup.bucket import _step_of


@pytest.mark.parametrize(
    "key, step",
    [
        ("runs/a/step_12/manifest.json", 12),
        ("runs/a/step_0/trainer/x", 0),
        ("runs/a/step_²/manifest.json", None),
        ("runs/a/step_١٢/manifest.json", None),  # Arabic-Indic digits: int() says 12, the dir is not step_12
        ("runs/a/step_012/manifest.json", None),
        ("runs/a/step_-1/manifest.json", None),
        ("runs/a/latest/manifest.json", None),
    ],
)
def test_bucket_keys_step_numbers(key, step):
    assert _step_of(key, "runs/a/") == step
