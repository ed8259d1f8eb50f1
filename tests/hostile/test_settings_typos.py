"""Issue 13 items 5, 6 and 9, the loaders: a typo in any settings file — a table name (``[bakup]``, ``[ofers]``) or
a key (``cache_tll``) — used to be ignored (the defaults applied: backup silently off) or named without its
line. Every settings file now goes through one loader (services/tomlfile.py): unknown tables and keys are
errors naming the file, the line and the near miss ("did you mean"), and a settings file that is a
directory, a dangling link or not UTF-8 is "cannot read", never the defaults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.settings import load_health_settings, load_lifecycle_settings, load_offer_settings, load_pods
from services.backup.s3 import BackupError, load_backup_settings
from services.errors import SettingsError
from services.offers.settings import OfferSettings


def backup(path: Path):
    return load_backup_settings(path, env={})


def _entry_error(pods):
    """A bad [pods.NAME] entry leaves that pod out (load_pods' ``broken``), with the same error."""
    raise next(iter(pods.broken.values()))


TYPOS = [  # file, loader, text, what the message must say (the line is always the typo's)
    (
        "pods.toml",
        load_pods,
        '# pods\n[pod.a]\nhost = "10.0.0.1"\n',
        ("line 2", "unknown table [pod]", "did you mean [pods]?"),
    ),
    (
        "pods.toml",
        lambda path: _entry_error(load_pods(path)),
        '[pods.a]\nhost = "10.0.0.1"\nprot = 22\n',
        ("line 3", "unknown key prot in [pods.a]", "did you mean port?"),
    ),
    (
        "settings.toml",
        load_offer_settings,
        "[offers]\ncache_tll = 60\n",
        ("line 2", "unknown key cache_tll", "did you mean cache_ttl?"),
    ),
    (
        "settings.toml",
        load_offer_settings,
        "[ofers]\ncache_ttl = 60\n",
        ("line 1", "unknown table [ofers]", "did you mean [offers]?"),
    ),
    (
        "settings.toml",
        load_offer_settings,
        '[offers.keys]\nlamda = "k"\n',
        ("line 2", "unknown key lamda", "did you mean lambda?"),
    ),
    (
        "settings.toml",
        load_lifecycle_settings,
        "[lifecycle]\nkeep_lats = 2\n",
        ("line 2", "keep_lats", "did you mean keep_last?"),
    ),
    (
        "settings.toml",
        load_lifecycle_settings,
        '[[lifecycle.checks]]\nnmae = "x"\nrun = "true"\n',
        ("line 2", "unknown key nmae", "did you mean name?"),
    ),
    ("settings.toml", load_health_settings, "[helth]\ndisk_pct = 90\n", ("line 1", "did you mean [health]?")),
    ("settings.toml", load_health_settings, "[health]\n\nnofile_mni = 1\n", ("line 3", "did you mean nofile_min?")),
    ("settings.toml", load_lifecycle_settings, '[backup]\nbucket = "b"\n', ("line 1", "belongs in backup.toml")),
    (
        "backup.toml",
        backup,
        '[bakup]\nbucket = "ckpts"\n',
        ("line 1", "unknown table [bakup]", "did you mean [backup]?"),
    ),
    ("backup.toml", backup, '[backup]\nbukcet = "ckpts"\n', ("line 2", "did you mean bucket?")),
    ("backup.toml", backup, '[backup]\nkeep_last = "3"\n', ("line 2", "backup.keep_last must be an integer")),
    ("backup.toml", backup, '[backup]\ncompression = "gzip"\n', ("line 2", "'zstd', 'none'")),
    ("backup.toml", backup, "[backup]\npart_size = 0\n", ("line 2", "at least 1")),
]


@pytest.mark.parametrize("name, load, text, says", TYPOS, ids=[f"{t[0]}: {t[3][-1]}" for t in TYPOS])
def test_a_typo_is_an_error_with_its_line_and_the_near_miss(tmp_path, name, load, text, says):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SettingsError) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(f"{path}, line ") and all(s in message for s in says), message
    assert info.value.hint
    assert path.read_text() == text  # never changed by the app


def test_backup_errors_stay_backup_errors_for_their_callers(tmp_path):
    path = tmp_path / "backup.toml"
    path.write_text('[backup]\naws_secret_access_key = "nope"\n')
    with pytest.raises(BackupError, match="unknown") as info:
        backup(path)
    assert isinstance(info.value, SettingsError) and "never in our settings" in info.value.hint
    assert "nope" not in str(info.value) + info.value.hint


def _dangling(path: Path) -> None:
    path.symlink_to(path.with_name("elsewhere.toml"))


UNREADABLE = {
    "a directory": (lambda p: p.mkdir(), "it is a directory"),
    "a dangling link": (_dangling, "does not exist"),
    "a FIFO": (lambda p: os.mkfifo(p), "not a regular file"),  # reading it would block the app for ever
    "Latin-1 bytes": (lambda p: p.write_bytes(b'[offers]\nimage = "caf\xe9"\n'), "not UTF-8 text (line 2)"),
    "2 MB": (lambda p: p.write_text("# " + "x" * 2_000_000 + "\n"), "more than a settings file can be"),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
@pytest.mark.parametrize(
    "name, load",
    [
        ("pods.toml", load_pods),
        ("settings.toml", load_offer_settings),
        ("settings.toml", load_lifecycle_settings),
        ("settings.toml", load_health_settings),
        ("backup.toml", backup),
    ],
)
def test_a_settings_file_that_cannot_be_read_is_never_the_defaults(tmp_path, case, name, load):
    make, why = UNREADABLE[case]
    path = tmp_path / name
    make(path)
    with pytest.raises(SettingsError) as info:
        load(path)
    assert str(info.value).startswith(f"cannot read {path}: ") and why in str(info.value), str(info.value)


def test_missing_files_are_the_defaults(tmp_path):
    assert load_pods(tmp_path / "pods.toml") == []
    assert load_offer_settings(tmp_path / "settings.toml") == OfferSettings()
    assert load_lifecycle_settings(tmp_path / "settings.toml").keep_last == 3
    assert backup(tmp_path / "backup.toml").bucket == ""


def test_good_files_still_load(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text(
        '[lifecycle]\nkeep_last = 2\nsecrets = ["HF_TOKEN"]\ncleanup_pods = ["*"]\n'
        '[lifecycle.env]\nNCCL_DEBUG = "INFO"\nOMP_NUM_THREADS = 4\n'
        '[[lifecycle.checks]]\nname = "data"\nrun = "test -d /data"\ntimeout = 5\n'
        '[offers]\ncache_ttl = 60\ndisk_gb = 200\n[offers.keys]\nlambda = "k"\n'
        "[health]\nnofile_min = 1024\nlog_alert_ttl_s = inf\n"
    )
    life = load_lifecycle_settings(path)
    assert (life.keep_last, life.secrets, life.cleanup_pods) == (2, ("HF_TOKEN",), ("*",))
    assert life.env["NCCL_DEBUG"] == "INFO" and life.env["OMP_NUM_THREADS"] == "4"
    assert life.checks[0].name == "data" and life.checks[0].timeout == 5.0
    offers = load_offer_settings(path)
    assert offers.keys == {"lambda": "k"} and offers.cache_ttl == 60.0 and offers.disk_gb == 200
    assert offers.cap_margin == 0.10  # not set: the default, in one place
    health = load_health_settings(path)
    assert health.nofile_min == 1024 and isinstance(health.nofile_min, int) and health.log_alert_ttl_s == float("inf")
