"""Watch is at-least-once across restarts at any point (S-5.5, §10): whatever the schedule of
appends, kills (SIGKILL right after a print, right after a checkpoint, at a random moment), corrupt
state files and batch sizes, every matching event is printed at least once and nothing else
is ever printed. Each watcher is a real (forked) process.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from watchkit import fork_cli, run_forked  # noqa: E402

from mempalace_logstream import LogStore, config, cursors  # noqa: E402
from tests.logfiles import new_log  # noqa: E402

APPENDS = {
    "to_me": {"from_agent": "alice", "to_agent": "bob"},
    "broadcast": {"from_agent": "carol", "to_agent": "*"},
    "my_broadcast": {"from_agent": "bob", "to_agent": "*"},
    "to_other": {"from_agent": "alice", "to_agent": "carol"},
    "typed_out": {"from_agent": "alice", "to_agent": "bob", "type": "chatter"},
}
MATCHING = {"to_me", "broadcast"}

step = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(sorted(APPENDS)), st.integers(1, 3)),
    st.tuples(st.just("run"), st.just("clean"), st.just(0)),
    st.tuples(st.just("run"), st.sampled_from(["print", "checkpoint"]), st.integers(1, 2)),
    st.tuples(st.just("run"), st.just("kill_at_random"), st.integers(0, 40)),
    st.tuples(st.just("corrupt"), st.sampled_from(["{bad json", "[]", '{"x": 1}']), st.just(0)),
)


def _printed(stdout: bytes) -> list[str]:
    text = stdout.decode(errors="replace")
    try:  # a single-shot run prints one indented document
        return [e["id"] for e in json.loads(text)["events"]] if text.strip() else []
    except ValueError:
        pass
    ids: list[str] = []
    for line in text.splitlines():  # --follow prints one envelope per line
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a line cut short by SIGKILL: it was never delivered whole
        ids += [e["id"] for e in doc["events"]]
    return ids


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=6), limit=st.integers(1, 3))
def test_watch_never_skips_a_matching_event_across_restarts(
    steps: list[tuple[str, str, int]], limit: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        db = str(home / "log.sqlite3")
        # watch's default state file under HOME=home: one file per log and agent
        palace = str(home / ".mempalace" / "palace")
        state = cursors.default_file("watch", "bob", config.resolve_db(db, None), palace)
        base = (
            "watch",
            "--db",
            db,
            "--agent",
            "bob",
            "--type",
            "note",
            "--json",
            "--limit",
            str(limit),
        )
        env = {"HOME": str(home)}
        expected: set[str] = set()
        unwanted: set[str] = set()
        printed: list[str] = []
        with LogStore.open(new_log(db)) as store:
            # The first run sees an empty log: its checkpoint is an empty cursor, so nothing
            # that is appended later may ever be skipped (no jump to the tip).
            first = run_forked(*base, "--idle-exit-ms", "1", env=env)
            assert first.returncode == 2, first.stderr
            for action, arg, n in steps:
                if action == "append":
                    for _ in range(n):
                        fields = {"type": "note", "stream": "s", "room": "r", **APPENDS[arg]}
                        ident = store.event_append(**fields).id
                        (expected if arg in MATCHING else unwanted).add(ident)
                elif action == "corrupt":
                    state.write_text(arg)
                elif arg == "clean":
                    printed += _printed(run_forked(*base, "--idle-exit-ms", "1", env=env).stdout)
                elif arg in ("print", "checkpoint"):  # SIGKILL right after that step
                    kill_env = {**env, "LOGSTREAM_TEST_KILL_AT": f"{arg}:{n}"}
                    proc = run_forked(*base, "--follow", "--idle-exit-ms", "1", env=kill_env)
                    printed += _printed(proc.stdout)
                else:
                    proc = fork_cli(*base, "--follow", env=env)
                    proc.wait_for_stdout(b"\n", timeout=n / 1000)
                    proc.send(signal.SIGKILL)
                    proc.wait(60)
                    printed += _printed(proc.stdout)
            for _ in range(len(expected) + 2):  # drain: run until nothing is left
                final = run_forked(*base, "--idle-exit-ms", "1", env=env)
                printed += _printed(final.stdout)
                if final.returncode == 2:
                    break
            assert final.returncode == 2, final.stderr
        assert expected <= set(printed), "a matching event was skipped"
        assert not (set(printed) & unwanted), "a non-matching event was printed"
