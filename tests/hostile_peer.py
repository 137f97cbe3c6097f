"""A hostile sync peer for tests: one file, stdlib only, started as a subprocess.

    python tests/hostile_peer.py MODE [--port N] [--events N] [--mb N] [--every S]
                                      [--declare-length] [--forge-origin REPLICA]

It binds 127.0.0.1 (port 0 = a free one), prints `listening http://127.0.0.1:PORT` on stdout
and serves `/sync/*` until killed. Every large body is generated lazily, a piece at a time, so
this process never holds it; a client that hangs up ends the response. Modes:

* `huge-event`: one event whose body is `--mb` MB (default 500) on `/sync/ops`.
* `long-page`: `--events` events (default 1,000,000) on `/sync/ops`, whatever limit is asked.
* `big-pages`: offers compact pages; every `/sync/ops_rows` page is `--mb` MB (default 200)
  of valid rows, and the next one is as big.
* `trickle-headers` / `trickle-body`: every response sends one byte every `--every` seconds
  (default 10), inside its status line and headers, or in its body after prompt headers.
* `forge`: serves one valid event that claims origin `--forge-origin` at origin_seq 10^15.

Large bodies are close-delimited (no Content-Length), so the client's cap on bytes read is
what stops them, not a header; `--declare-length` declares their nominal size instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

ME = "rep_" + "b" * 32  # this peer's replica id
OTHER = "rep_" + "c" * 32  # the origin its big pages claim
FORGED_SEQ = 10**15
COLUMNS = [
    "id",
    "origin_replica",
    "origin_seq",
    "hlc",
    "type",
    "stream",
    "room",
    "topic",
    "from_agent",
    "to_agent",
    "correlation_id",
    "branch",
    "base_commit",
    "status",
    "artifact_ids",
    "body",
    "created_at",
    "metadata",
    "sig",
    "key_id",
]
CHUNK = 64 * 1024


def event(origin: str, seq: int, body: str = "x") -> dict:
    ms = 1_700_000_000_000 + seq % 10**9
    return {
        "id": f"evt_20260101T000000_{origin[4:12]}{seq:012x}",
        "origin_replica": origin,
        "origin_seq": seq,
        "hlc": f"{ms:013d}-000000-{origin}",
        "type": "note",
        "stream": "s",
        "room": "r",
        "topic": None,
        "from_agent": "hostile",
        "to_agent": None,
        "correlation_id": None,
        "branch": None,
        "base_commit": None,
        "status": None,
        "artifact_ids": [],
        "body": body,
        "created_at": "2026-01-01T00:00:00.000Z",
        "metadata": {},
        "sig": None,
        "key_id": None,
    }


def events_page(origin: str, n: int, first: int = 1) -> Iterator[bytes]:
    yield f'{{"origin":"{origin}","count":{n},"events":['.encode()
    buf = []
    for i in range(n):
        buf.append(("," if i else "") + json.dumps(event(origin, first + i)))
        if len(buf) >= 200:
            yield "".join(buf).encode()
            buf = []
    yield ("".join(buf) + "]}").encode()


def huge_event(origin: str, mb: int) -> Iterator[bytes]:
    head, tail = json.dumps(event(origin, 1, "@@BODY@@")).split("@@BODY@@")
    yield f'{{"origin":"{origin}","count":1,"events":[{head}'.encode()
    piece = b"x" * CHUNK
    for _ in range(mb * 1024 * 1024 // CHUNK):
        yield piece
    yield f"{tail}]}}".encode()


def rows_page(origin: str, mb: int) -> Iterator[bytes]:
    head = {"origin": origin, "format": "rows-v2", "columns": COLUMNS, "count": 0}
    yield json.dumps(head)[:-1].encode() + b',"rows":['
    body = "y" * 1000
    rows = [json.dumps([event(origin, 1 + k, body)[c] for c in COLUMNS]) for k in range(50)]
    chunk = ",".join(rows).encode()  # the same 50 rows again and again: cheap to serve
    yield chunk
    for _ in range(mb * 1024 * 1024 // len(chunk)):
        yield b"," + chunk
    yield b"]}"


def route(
    o: argparse.Namespace, path: str, query: dict[str, str]
) -> list[bytes] | Iterator[bytes] | None:
    """The body of a GET/POST to `path`, as pieces (lazily for the big ones); None: 404."""
    if path == "/sync/version_vector":
        vv = {ME: 1}
        if o.mode == "long-page":
            vv = {ME: o.events}
        elif o.mode == "big-pages":
            vv = {OTHER: 10**9}
        elif o.mode == "forge":
            vv = {ME: 1, o.forge_origin: FORGED_SEQ}
        body: dict = {"replica_id": ME, "version_vector": vv, "profile": {}, "profiles": {}}
        if o.mode == "big-pages":
            body["profile"] = {"sync_rows": {"format": "rows-v2", "max_limit": 5000}}
        return [json.dumps(body).encode()]
    origin = query.get("origin", ME)
    if path == "/sync/ops_rows" and o.mode == "big-pages":
        return rows_page(origin, o.mb)
    if path == "/sync/ops":
        if o.mode == "huge-event":
            return huge_event(origin, o.mb)
        if o.mode == "long-page":
            return events_page(origin, o.events)
        if o.mode == "forge" and origin == o.forge_origin:
            return [
                json.dumps(
                    {"origin": origin, "count": 1, "events": [event(origin, FORGED_SEQ, "forged")]}
                ).encode()
            ]
        return [json.dumps({"origin": origin, "count": 0, "events": []}).encode()]
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # close-delimited bodies: no length needed
    opts: argparse.Namespace

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None

    def do_GET(self) -> None:  # noqa: N802
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(min(length, 1 << 20))
        self._serve()

    def _serve(self) -> None:
        o = self.opts
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            if o.mode == "trickle-headers":
                return self._trickle(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{}")
            parts = route(o, url.path, query)
            if parts is None:
                return self._send(404, [b'{"error": "not found"}'])
            if o.mode == "trickle-body":
                self._head(200, None)
                return self._trickle(b"".join(parts))
            self._send(200, parts)
        except (BrokenPipeError, ConnectionResetError):
            return None  # the client refused the rest: that is the point

    def _head(self, status: int, length: int | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def _send(self, status: int, parts: list[bytes] | Iterator[bytes]) -> None:
        length = None
        if isinstance(parts, list):
            length = sum(map(len, parts))
        elif self.opts.declare_length:  # a lazily made body: declare its nominal size
            length = self.opts.mb * 1024 * 1024
        self._head(status, length)
        for part in parts:
            self.wfile.write(part)

    def _trickle(self, data: bytes) -> None:
        for i in range(len(data)):
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            time.sleep(self.opts.every)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "mode",
        choices=[
            "huge-event",
            "long-page",
            "big-pages",
            "trickle-headers",
            "trickle-body",
            "forge",
        ],
    )
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--mb", type=int, default=None)
    p.add_argument("--every", type=float, default=10.0)
    p.add_argument("--declare-length", action="store_true")
    p.add_argument("--forge-origin", default="rep_" + "2" * 32)
    opts = p.parse_args(argv)
    if opts.mb is None:
        opts.mb = 500 if opts.mode == "huge-event" else 200
    Handler.opts = opts
    server = ThreadingHTTPServer(("127.0.0.1", opts.port), Handler)
    server.daemon_threads = True
    print(f"listening http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
