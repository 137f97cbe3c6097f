"""A hub that stops cleanly (issue 19, item 1): stopped with SIGTERM or SIGINT while clients
long-poll, `logstream serve` answers every open `event_wait` (HTTP `/v1/event_wait` and the
`mempalace_event_wait` tool at /mcp) at once with 503 `{"error": "hub is stopping", "field":
null}` and `Retry-After`, ends its SSE streams with a clean end of stream, and its log shows one
line for the stop and no traceback. A real `logstream serve` subprocess on both backends."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from mempalace_logstream import waits
from tests.outagekit import HubProcess, at_wait_cap, running_hub, until

WAITS = 20
MCP_WAITS = 4
LONG_MS = 120_000  # far past the test: only the stop can end these waits
STOPPING = {"error": "hub is stopping", "field": None}
ACCEPT = {"accept": "application/json, text/event-stream"}


def _rpc(method: str, params: dict[str, Any] | None = None, ident: int | None = None) -> Any:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    if ident is not None:
        msg["id"] = ident
    return msg


FULL = "too many open waits"  # the cap's refusal: the test's own probe held a slot then


def _http_wait(url: str, out: list[Any], i: int) -> None:
    body = {"since_event_id": "tip", "timeout_ms": LONG_MS, "to_agent": f"agent{i}"}
    try:
        while True:  # as a client told "retry" does, while the probe briefly held a slot
            resp = httpx.post(url + "/v1/event_wait", json=body, timeout=60)
            if not (resp.status_code == 503 and FULL in resp.json().get("error", "")):
                break
            time.sleep(0.05)
        out[i] = (resp.status_code, resp.headers.get("retry-after"), resp.json())
    except Exception as exc:  # the assertion below shows it
        out[i] = exc


def _mcp_wait(url: str, out: list[Any], i: int) -> None:
    """A `mempalace_event_wait` over streamable HTTP; the JSON-RPC answer it gets."""
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
    call = {"name": "mempalace_event_wait", "arguments": {"timeout_ms": LONG_MS}}
    try:
        with httpx.Client(timeout=60) as http:
            init = http.post(url + "/mcp", headers=ACCEPT, json=_rpc("initialize", hello, 1))
            session = {
                **ACCEPT,
                "mcp-session-id": init.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            http.post(url + "/mcp", headers=session, json=_rpc("notifications/initialized"))
            for ident in range(2, 1000):  # retried while the probe briefly held a slot
                with http.stream(
                    "POST", url + "/mcp", headers=session, json=_rpc("tools/call", call, ident)
                ) as resp:
                    data = [ln[5:].strip() for ln in resp.iter_lines() if ln.startswith("data:")]
                got = [json.loads(d) for d in data if d]
                if not (got and FULL in json.dumps(got[-1].get("result", {}))):
                    break
                time.sleep(0.05)
        out[i] = got
    except Exception as exc:
        out[i] = exc


def _sse(url: str, out: list[Any], opened: threading.Event) -> None:
    """An SSE subscriber: the lines it read, or the error its stream ended with."""
    lines: list[str] = []
    try:
        with httpx.stream("GET", url + "/v1/stream", timeout=60) as resp:
            for line in resp.iter_lines():
                lines.append(line)
                opened.set()
        out.append(lines)
    except Exception as exc:  # a stream cut short (no closing chunk) raises here
        out.append(exc)
        opened.set()


def _stop_during_long_polls(hub: HubProcess, sig: int) -> tuple[list[Any], list[Any], list[Any]]:
    http_out: list[Any] = [None] * (WAITS - MCP_WAITS)
    mcp_out: list[Any] = [None] * MCP_WAITS
    sse_out: list[Any] = []
    opened = threading.Event()
    threads = [
        threading.Thread(target=_http_wait, args=(hub.url, http_out, i))
        for i in range(len(http_out))
    ]
    threads += [threading.Thread(target=_mcp_wait, args=(hub.url, mcp_out, i)) for i in range(4)]
    threads.append(threading.Thread(target=_sse, args=(hub.url, sse_out, opened)))
    for t in threads:
        t.start()
    assert opened.wait(60)

    def blocked() -> bool:
        ended = [o for o in (*http_out, *mcp_out) if o is not None]
        assert ended == [], f"a wait ended before the stop: {ended}"  # never the cap, then
        return at_wait_cap(hub.url)

    until(blocked, timeout=90)  # a loaded machine opens 24 long polls slowly
    hub.stop(sig)
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    return http_out, mcp_out, sse_out


@pytest.mark.slow
def test_a_hub_stopped_with_sigterm_answers_every_open_wait_in_json(
    db_url: str, tmp_path: Path
) -> None:
    with running_hub(db_url, tmp_path, "--wait-max-clients", str(WAITS)) as hub:
        http_out, mcp_out, sse_out = _stop_during_long_polls(hub, signal.SIGTERM)
        for got in http_out:
            assert got == (503, str(waits.STOP_RETRY_AFTER_S), STOPPING), http_out
        for got in mcp_out:
            assert isinstance(got, list) and got, got
            result = got[-1]["result"]
            assert result["isError"] is True
            assert result["content"][0]["text"] == "hub is stopping"
        # The SSE stream ended with a clean end of stream (no truncated chunked body).
        assert isinstance(sse_out[0], list), sse_out
        assert ": connected" in sse_out[0]
        log = hub.log
        assert "Traceback" not in log and "ERROR" not in log, log
        stops = [line for line in log.splitlines() if "stopping" in line]
        assert len(stops) == 1, log
        assert "SIGTERM" in stops[0] and f"{WAITS} open wait" in stops[0], stops


@pytest.mark.slow
def test_a_hub_stopped_with_ctrl_c_answers_the_same(tmp_path: Path) -> None:
    db = str(tmp_path / "hub.sqlite3")
    with running_hub(db, tmp_path, "--wait-max-clients", str(WAITS)) as hub:
        http_out, mcp_out, _sse_out = _stop_during_long_polls(hub, signal.SIGINT)
        assert all(got == (503, str(waits.STOP_RETRY_AFTER_S), STOPPING) for got in http_out)
        assert all(got[-1]["result"]["isError"] for got in mcp_out), mcp_out
        assert "Traceback" not in hub.log
        assert [ln for ln in hub.log.splitlines() if "stopping" in ln][0].count("SIGINT") == 1
