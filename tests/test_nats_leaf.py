"""The leaf topology (issue 24, RFC 0011 "Leaf nodes"): a laptop's nats-server is a leaf node
of the hub's, with its own JetStream domain, reached through a TCP proxy that can cut the link.
Each site's `LOGSTREAM` sources from the other's only the events of the other site's log (a
filtered source: sourcing whole streams both ways echoes every event for ever), and the
subjects are denied on the link itself. Both logs keep appending while the link is cut; after
relinking they converge, and each stream holds each event once."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import nats
import pytest
from nats.js import api

from mempalace_logstream import LogStore
from mempalace_logstream.natsbridge import BridgeConfig, BridgeThread, token
from tests.natskit import SERVER, LinkProxy, _accepting, free_port, wait_for

pytestmark = pytest.mark.slow


def _conf(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _log(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


async def _make_streams(hub_url: str, leaf_url: str, hub_origin: str, leaf_origin: str) -> None:
    """Each site's stream, sourcing the other site's log's events from the other domain."""
    for url, other_domain, other_origin in (
        (hub_url, "leaf", leaf_origin),
        (leaf_url, "hub", hub_origin),
    ):
        nc = await nats.connect(url)
        try:
            await nc.jetstream().add_stream(
                name="LOGSTREAM",
                subjects=["logstream.>"],
                storage=api.StorageType.FILE,
                sources=[
                    api.StreamSource(
                        name="LOGSTREAM",
                        filter_subject=f"logstream.{token(other_origin)}.>",
                        external=api.ExternalStream(api=f"$JS.{other_domain}.API"),
                    )
                ],
            )
        finally:
            await nc.close()


async def _messages(url: str) -> int:
    nc = await nats.connect(url)
    try:
        return int((await nc.jetstream().stream_info("LOGSTREAM")).state.messages)
    finally:
        await nc.close()


def test_a_laptop_on_a_leaf_node_appends_offline_and_converges_after_relink(tmp_path: Path):
    hub_port, leaf_link, lap_port = free_port(), free_port(), free_port()
    proxy = LinkProxy(leaf_link)
    hub_conf = _conf(
        tmp_path / "hub.conf",
        f"listen: 127.0.0.1:{hub_port}\nserver_name: hub\n"
        f'jetstream {{ store_dir: "{tmp_path}/hub-js", domain: hub }}\n'
        f"leafnodes {{ listen: 127.0.0.1:{leaf_link} }}\n",
    )
    leaf_conf = _conf(
        tmp_path / "leaf.conf",
        f"listen: 127.0.0.1:{lap_port}\nserver_name: laptop\n"
        f'jetstream {{ store_dir: "{tmp_path}/leaf-js", domain: leaf }}\n'
        f'leafnodes {{ reconnect: "250ms", remotes: [ {{ url: "nats-leaf://127.0.0.1:{proxy.port}",'
        ' deny_imports: ["logstream.>"], deny_exports: ["logstream.>"] } ] }\n',
    )
    leaf_log = tmp_path / "leaf.log"
    procs = []
    for conf, log in ((hub_conf, tmp_path / "hub.log"), (leaf_conf, leaf_log)):
        with log.open("wb") as out:
            procs.append(subprocess.Popen([str(SERVER), "-c", str(conf)], stdout=out, stderr=out))
    hub = LogStore.open(str(tmp_path / "hub.sqlite3"))
    lap = LogStore.open(str(tmp_path / "laptop.sqlite3"))
    hub_url, lap_url = f"nats://127.0.0.1:{hub_port}", f"nats://127.0.0.1:{lap_port}"
    bridges: list[BridgeThread] = []
    try:
        wait_for(lambda: _accepting(hub_port) and _accepting(lap_port), 10, "both servers")
        wait_for(lambda: "JetStream using domains" in _log(leaf_log), 10, "the leaf link")
        asyncio.run(_make_streams(hub_url, lap_url, hub.replica_id, lap.replica_id))
        quiet = lambda _line: None  # noqa: E731
        bridges.append(BridgeThread(hub, BridgeConfig(url=hub_url), quiet).start())
        bridges.append(BridgeThread(lap, BridgeConfig(url=lap_url), quiet).start())

        def held(store: LogStore) -> set[str]:
            return {e.id for e in store.event_list(limit=500).events}

        def write(tag: str) -> tuple[set[str], set[str]]:
            """Five notes on each side: (the hub's ids, the laptop's ids)."""
            out: tuple[set[str], set[str]] = (set(), set())
            for i in range(5):
                for side, store in enumerate((hub, lap)):
                    ev = store.event_append(
                        type="note",
                        stream="s",
                        room="r",
                        from_agent=f"agent-{side}",
                        body=f"{tag} {i}",
                    )
                    out[side].add(ev.id)
            return out

        want = set().union(*write("linked"))
        wait_for(lambda: held(hub) == held(lap) == want, 20, "convergence over the link")
        proxy.cut()
        wait_for(lambda: "Leafnode connection closed" in _log(leaf_log), 10, "the link down")
        at_hub, on_laptop = write("offline")  # both sides keep appending while the link is down
        assert on_laptop <= held(lap) and not at_hub & held(lap)
        want |= at_hub | on_laptop
        proxy.relink()
        wait_for(lambda: held(hub) == held(lap) == want, 60, "convergence after relinking")
        assert asyncio.run(_messages(hub_url)) == asyncio.run(_messages(lap_url)) == len(want)
    finally:
        for thread in bridges:
            thread.stop()
        hub.close()
        lap.close()
        proxy.close()
        for proc in procs:
            proc.terminate()
            proc.wait(10)
