"""The probe's channel is read by its SSH session callbacks (services/pod/ssh.py ``_SSHStream``): a packet's data
goes into one buffer and the lines are cut there, one wake-up of the reader per packet. Over the real sshd, with
the bytes sent in pieces that cut lines anywhere, what comes out must be exactly what a plain split of the same
bytes gives: a line split across packets joined, CR kept as data (only LF ends a line), a line longer than
STREAM_HIGH in pieces of at most STREAM_HIGH, the last line without its newline at the end, then b"". A dropped
connection is "connection lost" after the lines that came, never a hang, and close() ends a waiting reader."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from services.errors import ConnectError
from services.pod import trusted
from services.pod.ssh import STREAM_HIGH, SSHConnection

pytestmark = pytest.mark.ssh

PAYLOAD = b"".join(
    [
        b'{"v":1,"t":1}\n',
        b"\n",
        b"crlf\r\n",
        b"a\rb\n",
        b"\r\n",
        b"y" * (STREAM_HIGH + 37_000) + b"\n",  # over STREAM_HIGH: two pieces
        b"z" * STREAM_HIGH + b"\n",  # exactly STREAM_HIGH before its newline: a piece, then the newline alone
        b"\xff\xfe not utf-8\n",
        b"last line, no newline",
    ]
)
# where the probe flushes: mid-line, after a CR, right before and after an LF, inside the long lines
CUTS = [3, 14, 15, 19, 20, 24, 27, 30, 31, 5000, 70_000, STREAM_HIGH + 10, STREAM_HIGH + 37_040, len(PAYLOAD) - 4]


def reference_pieces(data: bytes) -> list[bytes]:
    """What readline must return for ``data``: each LF-ended line, a line longer than STREAM_HIGH in
    STREAM_HIGH pieces (the newline goes with the last piece unless the piece is full), the last without LF."""
    out = []
    while data:
        end = data.find(b"\n", 0, STREAM_HIGH)
        size = end + 1 if end >= 0 else min(len(data), STREAM_HIGH)
        out.append(data[:size])
        data = data[size:]
    return out


def _over_ssh(script: Path):
    class FakeProbe(SSHConnection):
        def probe_bundle(self) -> trusted.Bundle:
            return trusted.pod_bundle(self.pod, (script,), "probe")

    return FakeProbe


def _writer(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "fake_probe.py"
    path.write_text(textwrap.dedent(body))
    return path


async def test_lines_cut_across_packets_come_out_as_a_plain_split(pod, tmp_path):
    (tmp_path / "payload").write_bytes(PAYLOAD)
    script = _writer(
        tmp_path,
        f"""
        import sys, time
        data = open({str(tmp_path / "payload")!r}, "rb").read()
        out = sys.stdout.buffer
        at = 0
        for cut in {CUTS!r} + [len(data)]:
            out.write(data[at:cut]); out.flush(); at = cut
            time.sleep(0.02)  # each piece its own packet
    """,
    )
    conn = _over_ssh(script)(pod)
    await conn.connect()
    try:
        stream = await conn.start_probe([])
        got = []
        while piece := await asyncio.wait_for(stream.readline(), 20):
            got.append(piece)
        assert await asyncio.wait_for(stream.readline(), 5) == b""  # the end stays the end
        assert await stream.exit_reason() == "exited with status 0"
    finally:
        await conn.close()
    assert got == reference_pieces(PAYLOAD)
    assert [len(p) for p in got if len(p) > 100] == [STREAM_HIGH, 37_001, STREAM_HIGH]
    assert got[got.index(b"z" * STREAM_HIGH) + 1] == b"\n"
    assert got[-1] == b"last line, no newline" and got[2] == b"crlf\r\n" and got[3] == b"a\rb\n"


async def test_a_dropped_connection_is_connection_lost_and_close_ends_a_waiting_reader(pod, sshd, tmp_path):
    script = _writer(
        tmp_path,
        """
        import sys, time
        sys.stdout.write("one\\n"); sys.stdout.write("two"); sys.stdout.flush()
        time.sleep(600)
    """,
    )
    conn = _over_ssh(script)(pod)
    await conn.connect()
    try:
        stream = await conn.start_probe([])
        assert await asyncio.wait_for(stream.readline(), 20) == b"one\n"
        waiting = asyncio.ensure_future(stream.readline())  # "two" has no newline yet: it waits
        await asyncio.sleep(0.3)
        assert not waiting.done()
        sshd.kill()  # the pod dies mid-stream
        assert await asyncio.wait_for(waiting, 20) == b"two"  # what came is handed over, then the loss
        with pytest.raises(ConnectError, match="connection lost"):
            await asyncio.wait_for(stream.readline(), 5)
    finally:
        await conn.close()


async def test_close_ends_a_reader_that_waits(pod, tmp_path):
    script = _writer(tmp_path, "import time\ntime.sleep(600)\n")
    conn = _over_ssh(script)(pod)
    await conn.connect()
    try:
        stream = await conn.start_probe([])
        waiting = asyncio.ensure_future(stream.readline())
        await asyncio.sleep(0.2)
        await stream.close()
        assert await asyncio.wait_for(waiting, 5) == b""
    finally:
        await conn.close()
