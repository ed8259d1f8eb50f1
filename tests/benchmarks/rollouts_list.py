"""rollouts_list: opening the Rollouts view on a step of 256 episodes of ~20 KB each, over a real loopback sshd.

Ours: ``RolloutReader.list_step`` (the reader runs on the pod through the guard, only the summaries come back)
for the newest step, then paging to an older step, on one kept SSH connection as the pane does; and one
episode opened. Baseline, measured in the same run on the same connection: what people do by hand, the
step's whole ``traces.jsonl`` brought over (``cat``, as ``ssh pod cat … | jq`` does) and every line parsed
here (``json.loads``, jq's part). Prints seconds (median of ``--rounds``) and the bytes each brought back.

    python tests/benchmarks/rollouts_list.py [--episodes 256] [--kb 20] [--rounds 5]

Target: list < 1 s for 256 × 20 KB. Prints figures; asserts nothing.
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
from pathlib import Path

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


async def timed(fn, rounds: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        out = await fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=256)
    ap.add_argument("--kb", type=int, default=20)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ptt-bench-"))
    run = make_run(tmp / "run", args.steps, args.episodes, args.kb)
    path = run / "rollouts" / f"step_{args.steps}" / "train" / "all" / "traces.jsonl"
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

            async def ours():
                return await reader.list_step(Filters())

            async def older():
                return await reader.list_step(Filters(step=1))

            async def one():
                return await reader.episode(f"e{args.steps}-100", args.steps)

            async def baseline():
                rc, out, _err = await conn.run(f"cat {shlex.quote(str(path))}", timeout=120)
                return out, [json.loads(line) for line in out.splitlines()]

            t_list, listing = await timed(ours, args.rounds)
            t_older, _ = await timed(older, args.rounds)
            t_one, _ = await timed(one, args.rounds)
            t_base, (raw, _parsed) = await timed(baseline, args.rounds)
            lines = await reader.call("list", ["--kind", "train"])
        sent = sum(len(json.dumps(x)) for x in lines)
        print(f"rollouts_list: {args.episodes} episodes × {path.stat().st_size / args.episodes / 1024:.1f} KB "
              f"({path.stat().st_size / 2**20:.1f} MB per step), loopback sshd, {os.cpu_count()} cores, "
              f"median of {args.rounds}")
        print(f"{'':<34} {'seconds':>8} {'bytes back':>12}")
        print(f"{'ours: list the newest step':<34} {t_list:>8.3f} {sent:>12,}")
        print(f"{'ours: page to an older step':<34} {t_older:>8.3f}")
        print(f"{'ours: open one episode':<34} {t_one:>8.3f}")
        print(f"{'ours: first list (uploads reader)':<34} {first:>8.3f}")
        print(f"{'baseline: cat | parse every line':<34} {t_base:>8.3f} {len(raw):>12,}")
        print(f"list vs baseline: {t_base / t_list:.1f}x faster, {len(raw) / max(1, sent):.0f}x fewer bytes; "
              f"{len(listing.episodes)} summaries")
    finally:
        server.kill()


if __name__ == "__main__":
    asyncio.run(main())
