"""What our MCP server costs an agent's context (issue 25): the bytes of `tools/list`, ours per
profile and the reference's, and how long `logstream mcp` takes to answer `initialize`.

    python bench/bench_mcp_tools.py [--samples N] [--quick | --smoke] [--no-ref]

Each server runs as a client starts it, a process spoken to over stdio by the official `mcp`
SDK client: ours (`python -m mempalace_logstream mcp`, `--tools coord` (the default) and
`--tools all`, on a local log and through a hub, `--hub`, where the presence tools are offered)
and the reference's (PyPI `mempalace==3.11.0`, its full install: `python -m
mempalace.mcp_server` and its three-tool `python -m mempalace.mcp_light_server`). The hub's
own `/mcp` (streamable HTTP, default and `?tools=all`) is listed too.

Bytes: the `tools` array of the `tools/list` result as JSON, written by `json.dumps` with its
defaults (", " and ": ", non-ASCII escaped), each tool as the SDK client reads it (`by_alias`,
no null fields): how the issue counted 27,128 (ours) and 10,992 (the reference's eight).
Initialize: wall time from spawning the process to the `initialize` answer, the median of
`--samples` fresh processes (the log already made). `--smoke` skips the reference (no network)
and prints ours. Never a test; tests/test_mcp_budget.py holds the default set to its budget.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

BENCH = "mcp_tools"
BUDGET = 16_000  # bytes of the default set's tools/list (issue 25)
INIT_TARGET_S = 1.0
# The tools the reference's full server shares with ours (its coordination tools).
SHARED = (
    "mempalace_event_append",
    "mempalace_task_create",
    "mempalace_event_list",
    "mempalace_event_wait",
    "mempalace_event_ack",
    "mempalace_artifact_put",
    "mempalace_artifact_get",
    "mempalace_patch_submit",
)


def list_bytes(tools: Sequence[dict[str, Any]]) -> int:
    """The bytes of a `tools` array as the issue counts them (see the module docstring)."""
    return len(json.dumps(list(tools)).encode())


def tool_dicts(listed: Any) -> list[dict[str, Any]]:
    """The tools of a `ListToolsResult` as JSON values (by alias, no null fields)."""
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]


async def stdio_tools(
    cmd: Sequence[str], env: dict[str, str] | None = None
) -> tuple[float, list[dict[str, Any]]]:
    """(seconds from spawn to the `initialize` answer, its tools) of a stdio MCP server."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=cmd[0], args=list(cmd[1:]), env=env)
    with open(os.devnull, "w") as quiet:
        t0 = time.perf_counter()
        async with stdio_client(params, errlog=quiet) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                elapsed = time.perf_counter() - t0
                listed = await session.list_tools()
    return elapsed, tool_dicts(listed)


async def http_tools(url: str) -> list[dict[str, Any]]:
    """The tools a streamable HTTP MCP endpoint lists."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return tool_dicts(await session.list_tools())


def ours(*args: str) -> list[str]:
    return [sys.executable, "-m", "mempalace_logstream", "mcp", *args]


def our_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(common.REPO), "NO_COLOR": "1"}


def measure_ours(tmp: Path, samples: int) -> tuple[dict[str, list[dict[str, Any]]], list[float]]:
    """{row: tools} of our servers, and the initialize times of the default one."""
    db = ["--db", str(tmp / "mcp.sqlite3")]
    rows: dict[str, list[dict[str, Any]]] = {}
    times: list[float] = []
    for _ in range(samples + 1):  # the first one makes the log: untimed
        elapsed, rows["logstream mcp (coord, the default)"] = asyncio.run(
            stdio_tools(ours(*db), our_env())
        )
        times.append(elapsed)
    _, rows["logstream mcp --tools all"] = asyncio.run(
        stdio_tools(ours(*db, "--tools", "all"), our_env())
    )
    with common.our_hub(tmp / "hub.sqlite3", our_env()) as url:
        for label, extra in (("", ()), (" --tools all", ("--tools", "all"))):
            _, tools = asyncio.run(stdio_tools(ours("--hub", url, *extra), our_env()))
            rows[f"logstream mcp --hub{label or ' (coord)'}"] = tools
        rows["hub /mcp (coord)"] = asyncio.run(http_tools(url + "/mcp"))
        rows["hub /mcp?tools=all"] = asyncio.run(http_tools(url + "/mcp?tools=all"))
    return rows, times[1:]


def measure_reference(refpkg: Any, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    """{row: tools} of the reference's full and light MCP servers (its full install)."""
    python = str(refpkg.ref_full_python())
    (tmp / "home").mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(tmp / "home"), "MEMPALACE_PALACE_PATH": str(tmp / "palace")}
    rows = {}
    for module in ("mempalace.mcp_server", "mempalace.mcp_light_server"):
        _, rows[f"reference {module}"] = asyncio.run(stdio_tools([python, "-m", module], env))
    return rows


def report(rows: dict[str, list[dict[str, Any]]], times: list[float]) -> None:
    table = [(name, len(tools), f"{list_bytes(tools):,}") for name, tools in rows.items()]
    heads = ["server", "tools", "bytes"]
    common.print_table("tools/list (bytes as the issue counts them)", heads, table)
    default = rows["logstream mcp (coord, the default)"]
    for label, tools in (("", default), (" --hub", rows["logstream mcp --hub (coord)"])):
        what = f"tools/list bytes, logstream mcp{label} (default)"
        common.target_line(BENCH, what, list_bytes(tools), "bytes", "<=", BUDGET)
    median = common.median(times)
    common.target_line(BENCH, "logstream mcp initialize p50", median, "s", "<=", INIT_TARGET_S)
    if "reference mempalace.mcp_server" in rows:
        shared(default, rows["reference mempalace.mcp_server"])
        light = list_bytes(rows["reference mempalace.mcp_light_server"])
        what = "our default set / the reference's light server, bytes"
        common.ratio_line(BENCH, what, list_bytes(default) / light)


def tool_bytes(tool: dict[str, Any]) -> int:
    """One tool's bytes, counted as in `list_bytes`."""
    return len(json.dumps(tool).encode())


def shared(default: list[dict[str, Any]], ref: list[dict[str, Any]]) -> None:
    """The eight tools both servers offer, tool by tool, and their total."""
    mine = {t["name"]: tool_bytes(t) for t in default}
    theirs = {t["name"]: tool_bytes(t) for t in ref}
    rows = [(n, mine[n], theirs[n]) for n in SHARED]
    rows.append(("total", sum(mine[n] for n in SHARED), sum(theirs[n] for n in SHARED)))
    table = [(n, f"{a:,}", f"{b:,}", common.fmt_num(a / b, 2)) for n, a, b in rows]
    heads = ["tool", "ours", "reference", "ours/ref"]
    common.print_table("the eight tools shared with the reference (bytes)", heads, table)
    print("reference per tool:", json.dumps({n: theirs[n] for n in SHARED}))
    total = rows[-1][1] / rows[-1][2]
    common.ratio_line(BENCH, "the shared eight, ours/reference bytes", total, "<=", 1.0)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_mcp_tools.py", description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=None, help="initialize samples (default 7)")
    p.add_argument("--quick", action="store_true", help="3 initialize samples")
    p.add_argument("--no-ref", action="store_true", help="skip the reference package")
    common.add_smoke(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    samples = args.samples or (1 if args.smoke else 3 if args.quick else 7)
    print(common.machine_line())
    refpkg, reason = common.reference_unless(args.no_ref, args.smoke)
    with common.temp_dir() as tmp:
        rows, times = measure_ours(tmp, samples)
        if refpkg is not None:
            rows.update(measure_reference(refpkg, tmp))
        elif reason not in ("--smoke",):
            print(f"reference not measured: {reason}")
    report(rows, times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
