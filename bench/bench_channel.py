"""Channel push latency (issue 13): an append in one process -> the `notifications/claude/channel`
received by the official SDK client in another, next to the `watch`-style wake in the same run.

    python bench/bench_channel.py [--quick] [--samples N]

The server is `logstream mcp --agent codex --channel` over stdio, a real subprocess; the client
runs in this process (the SDK's ClientSession with a notification binding); the appender is a
third process. Stamps are CLOCK_MONOTONIC (system-wide on Linux): after the appender's
`event_append` returned -> when the client's binding received the notification. Samples are
spaced 120-160 ms apart, under the channel's default rate (3 per 250 ms), so each is delivered
at once: this measures the push path, not the burst rule. Never a test; figures go to
docs/bench/channel.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.bench_wake import OURS_APPENDER, OURS_WAITER, Worker, our_env, wake_samples

BENCH = "channel"
WARMUP = 5
AGENT = "codex"
_APPENDER = r"""
import json, sys, time
from mempalace_logstream import LogStore
store = LogStore.open(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    e = store.event_append(type="note", stream="s", room="r", from_agent="claude",
                           to_agent="codex", body="ping")
    t1 = time.monotonic_ns()
    print(json.dumps({"t1": t1, "id": e.id}), flush=True)
store.close()
"""


def channel_samples(db: Path, n: int, warmup: int = WARMUP) -> list[float]:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.extension import NotificationBinding
    from mcp.client.stdio import stdio_client
    from pydantic import BaseModel

    class Params(BaseModel):
        content: str
        meta: dict[str, str]

    arrivals: dict[str, int] = {}
    got = anyio.Event()

    async def handler(params: Params) -> None:
        nonlocal got
        arrivals[params.meta["event_id"]] = time.monotonic_ns()
        got.set()

    cursor = db.with_suffix(".cursor.json")
    server = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "mempalace_logstream", "mcp", "--db", str(db), "--agent", AGENT),
            *("--channel", "--state-file", str(cursor)),
        ],
        env=our_env(),
    )
    binding = NotificationBinding(
        method="notifications/claude/channel", params_type=Params, handler=handler
    )
    samples: list[float] = []

    async def run() -> None:
        nonlocal got
        appender = Worker(sys.executable, _APPENDER, f"sqlite:///{db}", our_env())
        try:
            async with (
                stdio_client(server, errlog=open(os.devnull, "w")) as (read, write),  # noqa: SIM115
                ClientSession(read, write, notification_bindings=[binding]) as session,
            ):
                await session.initialize()
                with anyio.fail_after(30):
                    while not cursor.exists():  # the channel's first checkpoint: it is started
                        await anyio.sleep(0.01)
                for i in range(n + warmup):
                    await anyio.sleep(random.uniform(0.12, 0.16))
                    got = anyio.Event()
                    appender.send("go")
                    sent = json.loads(appender.read())
                    with anyio.fail_after(30):
                        while sent["id"] not in arrivals:
                            await got.wait()
                            got = anyio.Event()
                    if i >= warmup:
                        samples.append(max(0, arrivals[sent["id"]] - sent["t1"]) / 1e9)
        finally:
            appender.close()

    anyio.run(run)
    return samples


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_channel.py", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="20 samples")
    common.add_smoke(p)
    p.add_argument("--samples", type=int, default=None, help="samples per system (default 200)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.samples or (2 if args.smoke else 20 if args.quick else 200)
    print(common.machine_line())
    with common.temp_dir() as tmp:
        push = channel_samples(tmp / "channel.sqlite3", n, 1 if args.smoke else WARMUP)
        wake = wake_samples(
            sys.executable,
            OURS_WAITER,
            OURS_APPENDER,
            f"sqlite:///{tmp / 'w.sqlite3'}",
            our_env(),
            n,
        )["commit"]
    rows = []
    for label, values in (
        ("channel: append returned -> SDK client got the notification", push),
        ("watch-style wake: append returned -> event_wait returned", wake),
    ):
        s = common.summarize(values)
        rows.append(
            [label, common.fmt_ms(s["p50"]), common.fmt_ms(s["p95"]), common.fmt_ms(s["max"]), n]
        )
    common.print_table("push latency, SQLite (ms)", ["path", "p50", "p95", "max", "n"], rows)
    s = common.summarize(push)
    common.target_line(
        BENCH, "channel notification p50 after commit", s["p50"] * 1e3, "ms", "<=", 10
    )
    common.ratio_line(BENCH, "channel p50 / wake p50", s["p50"] / common.summarize(wake)["p50"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
