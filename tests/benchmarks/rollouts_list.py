"""rollouts_list: opening the Rollouts view on a step of 256 episodes of ~20 KB each, over a real loopback sshd.

Ours: ``RolloutReader.list_step`` for the newest step (the reader runs on the pod through the guard, only the
summaries come back), on one kept SSH connection as the pane does:

- open: the first list of a connection: the reader process started (SSH exec, interpreter, guard check) and
  the step read from nothing, as when the pane opens;
- refresh: the same step again from the kept reader (the pane re-reads the newest step every 10 s);
- older: paging to a step the kept reader has not read yet;
- one by one: a list where each request is its own SSH exec (what runs where the kept reader cannot start);
- one episode opened.

Baseline, measured in the same run on the same connection: what people do by hand, the step's whole
``traces.jsonl`` brought over (``cat``, as ``ssh pod cat … | jq`` does) and every line parsed here
(``json.loads``, jq's part). Prints seconds (median of ``--rounds``) and the bytes each brought back.

    python tests/benchmarks/rollouts_list.py [--episodes 256] [--kb 20] [--rounds 7]

Target: open < 1 s for 256 × 20 KB. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from services.demo.trainer import trace_record  # noqa: E402
from services.monitor.rollouts import Filters, RolloutReader  # noqa: E402
from services.pod.ssh import SSHConnection  # noqa: E402
from tests.conftest import ClientHome, _make_server  # noqa: E402


def make_run(root: Path, steps: int, episodes: int, kb: int) -> Path:
    for step in range(1, steps + 1):
        d = root / "rollouts" / f"step_{step}" / "train" / "all"
        d.mkdir(parents=True)
        with (d / "traces.jsonl").open("w") as f:
            for i in range(episodes):
                rec = trace_record(step, i, 1.0, 2.0, 1.78e9, random.Random(f"{step}:{i}"))
                size = len(json.dumps(rec))
                if size < kb * 1024:  # the bulk of a real record: token ids and logprobs of the turns
                    node = rec["traces"][0]["nodes"][-1]
                    n = (kb * 1024 - size) // 10
                    node["token_ids"] = [random.randrange(150000) for _ in range(n)]
                    node["logprobs"] = [-0.5] * (n // 2)
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return root


async def timed(
    fn: Callable[[int], Awaitable[Any]], rounds: int, before: Callable[[int], Awaitable[Any]] | None = None
) -> tuple[float, Any]:
    times, out = [], None
    for i in range(rounds):
        if before is not None:
            await before(i)  # not timed
        t = time.perf_counter()
        out = await fn(i)
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=256)
    ap.add_argument("--kb", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    steps = args.rounds + 1  # paging reads a step not read before in every round
    tmp = Path(tempfile.mkdtemp(prefix="ptt-bench-"))
    run = make_run(tmp / "run", steps, args.episodes, args.kb)
    path = run / "rollouts" / f"step_{steps}" / "train" / "all" / "traces.jsonl"
    server = _make_server(tmp / "sshd")
    server.start()
    home_dir = tmp / "home"
    (home_dir / ".ssh").mkdir(parents=True, mode=0o700)
    os.environ["HOME"] = str(home_dir)
    os.environ.pop("SSH_AUTH_SOCK", None)
    home = ClientHome(home=home_dir, server=server)
    home.write_ssh_config()
    home.trust()
    try:
        async with SSHConnection(server.pod(probe_dir=str(tmp / "podstate"))) as conn:
            reader = RolloutReader(conn, str(run))
            first = time.perf_counter()
            await reader.list_step(Filters())  # the first: uploads the reader (once per content)
            first = time.perf_counter() - first

            async def fresh(_i: int) -> None:
                await reader.stop()

            async def warm(_i: int) -> None:
                await reader.stop()
                await reader.episode(f"e{steps}-0", steps)  # a started reader that has listed nothing

            async def one_by_one(_i: int) -> None:
                await reader.stop(one_by_one=True)

            async def listed(_i: int) -> Any:
                return await reader.list_step(Filters())

            async def older(i: int) -> Any:
                return await reader.list_step(Filters(step=i + 1))

            async def one(_i: int) -> Any:
                return await reader.episode(f"e{steps}-100", steps)

            async def baseline(_i: int) -> Any:
                rc, out, _err = await conn.run(f"cat {shlex.quote(str(path))}", timeout=120)
                return out, [json.loads(line) for line in out.splitlines()]

            t_open, listing = await timed(listed, args.rounds, fresh)
            t_refresh, _ = await timed(listed, args.rounds)
            t_older, _ = await timed(older, args.rounds, warm)
            t_one, _ = await timed(one, args.rounds)
            t_each, _ = await timed(listed, args.rounds, one_by_one)
            t_base, (raw, _parsed) = await timed(baseline, args.rounds)
            lines = await reader.call("list", ["--kind", "train"])
        sent = sum(len(json.dumps(x)) for x in lines)
        print(
            f"rollouts_list: {args.episodes} episodes × {path.stat().st_size / args.episodes / 1024:.1f} KB "
            f"({path.stat().st_size / 2**20:.1f} MB per step), loopback sshd, {os.cpu_count()} cores, "
            f"median of {args.rounds}"
        )
        print(f"{'':<40} {'seconds':>8} {'bytes back':>12}")
        print(f"{'ours: open (reader started, step cold)':<40} {t_open:>8.3f} {sent:>12,}")
        print(f"{'ours: refresh the newest step':<40} {t_refresh:>8.3f}")
        print(f"{'ours: page to an older step (cold)':<40} {t_older:>8.3f}")
        print(f"{'ours: open one episode':<40} {t_one:>8.3f}")
        print(f"{'ours: list, one exec per request':<40} {t_each:>8.3f}")
        print(f"{'ours: first list (uploads reader)':<40} {first:>8.3f}")
        print(f"{'baseline: cat | parse every line':<40} {t_base:>8.3f} {len(raw):>12,}")
        print(
            f"open vs baseline: {t_base / t_open:.1f}x faster, {len(raw) / max(1, sent):.0f}x fewer bytes; "
            f"{len(listing.episodes)} summaries"
        )
    finally:
        server.kill()


if __name__ == "__main__":
    asyncio.run(main())
