"""services.text.plain: the one function outside text goes through before a terminal or a push sees it."""

from __future__ import annotations

import os
import re
import tempfile

import pytest

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "ptt-hypothesis"))

from hypothesis import example, given, settings, strategies as st

from services.text import plain

FAST = settings(max_examples=400, deadline=None, database=None)
# what a terminal acts on instead of printing
ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")

# text built from the pieces that attacks are made of, so the property meets them often
pieces = st.sampled_from(
    [
        "\x1b",
        "[",
        "]",
        "\x07",
        "\\",
        "\x9b",
        "\x9d",
        "\x9c",
        "52;c;",
        "0;",
        "8;;",
        "2J",
        "P",
        "_",
        "^",
        "X",
        "\r",
        "\n",
        "\t",
        "\x00",
        "\x7f",
        "\u202e",
        "a",
        "é",
        "🙂",
        " ",
    ]
)
hostile = st.lists(st.one_of(pieces, st.text(max_size=5)), max_size=30).map("".join)


@FAST
@given(st.one_of(st.text(), hostile), st.booleans())
@example("\x1b]52;c;ZWNobyBwd25lZA==\x07ok", False)
def test_nothing_a_terminal_acts_on_is_left(text, oneline):
    out = plain(text, oneline=oneline)
    assert not ACTIVE.search(out)
    assert plain(out, oneline=oneline) == out  # idempotent: cleaning twice changes nothing
    if oneline:
        assert "\n" not in out and "\t" not in out


@FAST
@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp"))))
def test_printable_text_is_shown_as_written(text):
    assert plain(text) == text


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("\x1b]52;c;ZWNobyBwd25lZA==\x07GPU", "GPU"),  # OSC 52: a clipboard write
        ("\x1b]0;pwned\x1b\\H100", "H100"),  # OSC 0: the window title, ended by ST
        ("\x1b[2J\x1b[HNVIDIA H100", "NVIDIA H100"),  # clear the screen, cursor home
        ("\x1b]8;;https://evil.example\x07click\x1b]8;;\x07", "click"),  # OSC 8 link: the text stays, the link goes
        ("\x1b[31mERROR\x1b[0m disk full", "ERROR disk full"),  # a coloured log line reads as its words
        ("\x9b2J\x9d0;t\x9cx", "x"),  # the same in C1 form
        ("loss\rHACK", "loss\nHACK"),  # a carriage return never overwrites what was shown
        ("a\x00b\x07c\x7fd", "abcd"),
        ("evil\u202egnp.exe", "evilgnp.exe"),  # a right-to-left override cannot reorder what is shown
        (
            "[rank0]: CUDA out of memory [/workspace/ckpt/step_10]",
            "[rank0]: CUDA out of memory [/workspace/ckpt/step_10]",
        ),
        ("\x1bP+q544e\x1b\\after", "after"),  # DCS
        ("unterminated \x1b]0;title", "unterminated "),
    ],
)
def test_known_sequences(raw, shown):
    assert plain(raw) == shown


def test_oneline_joins_lines_and_tabs():
    assert plain("a\n\tb\r\nc  ", oneline=True) == "a b c"
    assert plain(ValueError("bad [x]\n")) == "bad [x]\n"  # anything is str()-ed
