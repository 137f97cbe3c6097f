"""The hub's CPU per append without a socket or a client, for callgrind (issue 25).

    python bench/profile_hub_asgi.py [--appends 2000] [--stub op|call|none] [--profile]

The hub's app (`http.create_app`, a token, a fresh SQLite file, durability off) behind
uvicorn's HTTP protocol as `HubServer` runs it (`one_write.OneWriteProtocol` on uvloop, the
proxy-headers middleware `logstream serve` gets), fed the bench's `POST /v1/event_append`
request bytes on a fake transport, one request at a time, each answered before the next is
fed. `--stub op` (the default) answers `event_append` with one stored result inside the
worker thread (the hop, `check_args` and the ledger hook stay: everything but the store);
`--stub call` stubs `aio.call` (the HTTP layer alone, no hop); `--stub none` calls the store.
Prints the process CPU per append; under `valgrind --tool=callgrind` run it twice (e.g.
`--appends 200` and `--appends 2200`) and divide the difference of the two instruction counts
by the difference of appends. Never a test.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKEN = "bench-hub-token"
EVENT = {
    "type": "bench.hub",
    "stream": "bench",
    "room": "r",
    "from_agent": "w00",
    "to_agent": "*",
    "body": "x" * 100,
}


def request_bytes() -> bytes:
    body = json.dumps(EVENT).encode()
    head = (
        "POST /v1/event_append HTTP/1.1\r\nHost: 127.0.0.1:8765\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class FakeTransport(asyncio.Transport):
    """Collects what the protocol writes; `answered` is set once a whole response is in."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[bytes] = []
        self.answered = asyncio.Event()
        self.closing = False

    def write(self, data: Any) -> None:
        self.out.append(bytes(data))
        if b"\r\n\r\n" in self.out[0]:
            head, _, rest = b"".join(self.out).partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            if len(rest) >= length:
                self.answered.set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8765)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def run(args: argparse.Namespace, tmp: str) -> None:
    import uvicorn
    from uvicorn.server import ServerState

    from mempalace_logstream import LogStore, aio, http, operations
    from mempalace_logstream.http.server import HubServer

    store = LogStore.open(os.path.join(tmp, "hub.sqlite3"), durability="off")
    stored = operations.call(store, "event_append", dict(EVENT))
    if args.stub == "op":
        op = operations.OPERATIONS["event_append"]
        stub = dataclasses.replace(op, handler=lambda _store, **_kw: stored)
        operations.OPERATIONS["event_append"] = stub
    elif args.stub == "call":

        async def answer(store: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
            return stored

        aio.call = answer
    app = http.create_app(store, http.HubSettings(token=TOKEN))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none")
    server = HubServer(config, app)
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Sun, 06 Dec 2026 14:00:00 GMT"), *config.encoded_headers]
    protocol_class: Any = config.http_protocol_class
    protocol = protocol_class(config=config, server_state=state, app_state={})
    transport = FakeTransport()
    protocol.connection_made(transport)
    data = request_bytes()

    async def one() -> None:
        transport.out.clear()
        transport.answered.clear()
        protocol.data_received(data)
        await transport.answered.wait()
        assert transport.out[0].startswith(b"HTTP/1.1 200"), transport.out

    for _ in range(50):
        await one()
    prof = cProfile.Profile() if args.profile else None
    t0 = time.process_time()
    if prof:
        prof.enable()
    for _ in range(args.appends):
        await one()
    if prof:
        prof.disable()
    cpu = time.process_time() - t0
    print(f"stub {args.stub}: {cpu * 1e6 / max(args.appends, 1):.1f} µs of CPU per append")
    del server
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--appends", type=int, default=2000)
    p.add_argument("--stub", default="op", choices=("op", "call", "none"))
    p.add_argument("--profile", action="store_true")
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args(argv)
    import uvloop

    with tempfile.TemporaryDirectory(prefix="logstream-profile-asgi-") as tmp:
        uvloop.run(run(args, tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
