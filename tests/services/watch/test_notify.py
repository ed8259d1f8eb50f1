"""Push notifications (services/watch/notify.py) through real apprise to a real HTTP receiver on 127.0.0.1:
the message arrives with its title and body, a dead target is reported masked and never raises, URLs
never show (repr, errors, JSON logs — apprise's own logger included), and ``[notify]`` is read under the
settings files' error policy (line, near miss) without echoing a URL."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from services.errors import SettingsError
from services.models import Severity
from services.tomlfile import read_toml
from services.watch import jsonlog
from services.watch.notify import Notifier, hello_message, mask_url, notify_settings, secret_parts
from services.watch.threads import Message, QuietHours
from tests.conftest import free_port
from tests.services.watch.receiver import receiver

SECRET = "json://127.0.0.1:{port}/hooks/T0KEN-s3cr3t-abcdef"


def read(tmp_path: Path, text: str, env: dict | None = None):
    path = tmp_path / "settings.toml"
    path.write_text(text)
    return notify_settings(read_toml(path), env=env or {})


def test_a_message_reaches_a_json_webhook_and_a_dead_one_is_reported_masked():
    with receiver() as rx:
        dead = f"json://127.0.0.1:{free_port()}/nobody-listens-here"
        notifier = Notifier([rx.url("alerts"), dead])
        msg = Message(
            "opened",
            "[OPENED] p1: No training progress",
            "step 12\nFix: resume",
            Severity.CRITICAL,
            "#abc123",
            "p1",
            "no-progress",
        )
        results = notifier.send(msg)
        assert results == [("json://***", True), ("json://***", False)]
        ((path, body),) = rx.posts
        assert path == "/alerts"
        assert body["title"] == msg.title and body["message"] == msg.body and body["type"] == "failure"


def test_a_resolved_message_is_a_success_and_the_test_message_says_what_it_is():
    with receiver() as rx:
        notifier = Notifier([rx.url()])
        notifier.send(Message("resolved", "[RESOLVED] p1: x", "ok", Severity.INFO))
        notifier.send(hello_message("now"))
        assert [b["type"] for b in rx.bodies] == ["success", "info"]
        assert rx.bodies[1]["title"].startswith("[TEST]")


def test_a_url_apprise_does_not_know_is_a_settings_error_that_does_not_show_it():
    with pytest.raises(SettingsError) as info:
        Notifier(["json://127.0.0.1:1/ok", "nosuchservice://T0KEN-s3cr3t-abcdef"])
    text = str(info.value) + info.value.hint
    assert "#2" in text and "nosuchservice://***" in text and "T0KEN" not in text


def test_masking_and_repr_never_show_a_url(tmp_path: Path):
    assert mask_url("slack://T000/B000/XXXXXXXX") == "slack://***"
    assert mask_url("not a url at all T0KEN") == "***"
    settings = read(tmp_path, '[notify]\nurls = ["tgram://123456:T0KEN-s3cr3t/42"]\n')
    assert "T0KEN" not in repr(settings) and "tgram://***" in repr(settings)


def test_json_logs_redact_the_urls_whatever_logs_them_and_apprise_is_silenced():
    url = SECRET.format(port=free_port())
    stream = io.StringIO()
    handler = jsonlog.setup(stream, secrets=secret_parts([url]))
    try:
        Notifier([url]).send(hello_message("now"))  # fails: nobody listens; apprise would log the host
        logging.getLogger("somewhere").warning("posting to %s failed", url)
        logging.getLogger("other").error("token T0KEN-s3cr3t-abcdef leaked in a message")
    finally:
        logging.getLogger().removeHandler(handler)
    out = stream.getvalue()
    assert out and "T0KEN" not in out and "s3cr3t" not in out
    import json

    lines = [json.loads(line) for line in out.splitlines()]
    assert any(line["msg"] == "posting to *** failed" for line in lines)
    assert not any(line["logger"].startswith("apprise") for line in lines)


def test_notify_settings_are_read_with_the_policy(tmp_path: Path):
    s = read(
        tmp_path,
        '[notify]\nurls = ["ntfy://topic-1"]\nmin_severity = "critical"\nquiet_hours = "22:00-07:00"\n'
        "min_interval_s = 60\nresolve_after_s = 5\ntimeout_s = 7\nretry_for_s = 3600\n",
        env={"PRIME_TRAIN_TUI_NOTIFY": "json://a/b, ntfy://topic-1"},
    )
    assert s.urls == ("ntfy://topic-1", "json://a/b")
    assert s.min_severity is Severity.CRITICAL and s.quiet_hours == QuietHours(22 * 60, 7 * 60)
    p = s.policy()
    assert (p.min_interval_s, p.resolve_after_s) == (60.0, 5.0)
    assert (s.timeout_s, s.retry_for_s) == (7.0, 3600.0)
    assert (read(tmp_path, "").timeout_s, read(tmp_path, "").retry_for_s) == (20.0, 21600.0)
    assert read(tmp_path, "").urls == ()


BAD = [
    ('[notify]\nurl = ["ntfy://x"]\n', ("line 2", "unknown key url", "did you mean urls?")),
    ('[notify]\nurls = "slack://T0KEN-s3cr3t"\n', ("line 2", "must be an array")),
    ('[notify]\nurls = ["ntfy://ok", "T0KEN-s3cr3t"]\n', ("line 2", "urls[1] is not a notification URL")),
    ('[notify]\nmin_severity = "loud"\n', ("line 2", "info, warning or critical")),
    ('[notify]\n\nquiet_hours = "10pm-7am"\n', ("line 3", "22:00-07:00")),
    ("[notify]\nresolve_after_s = -1\n", ("line 2", "≥ 0")),
    ('[notify]\nmin_interval_s = "often"\n', ("line 2", "must be a number")),
    ("[notify]\ntimeout_s = 0\n", ("line 2", "timeout_s must be a number of seconds > 0")),
    ("[notify]\nretry_for_s = 1e9\n", ("line 2", "at most a week")),
]


@pytest.mark.parametrize("text, says", BAD, ids=[b[1][-1] for b in BAD])
def test_bad_notify_settings_name_the_line_and_never_echo_a_url(tmp_path: Path, text: str, says):
    with pytest.raises(SettingsError) as info:
        read(tmp_path, text)
    message = str(info.value)
    assert all(s in message for s in says), message
    assert "T0KEN" not in message + info.value.hint
