"""The deferred dataclasses (lazy.py `dataclass`, issue 25): the records a CLI write makes
(`Event`, `EventDraft`, `TaskSettings`, the ledger's `Life`, …) are made dataclasses by
`dataclasses.dataclass` itself on first need, so a write that never needs one loads neither
`dataclasses` nor `inspect` (~40 M instructions of a ~240 M one). Each way of needing one
(a call, `==`, `hash`, `repr`, an assignment, `dataclasses.fields`/`replace`/`asdict`/
`is_dataclass`, `__match_args__`) gives what an eagerly made dataclass gives; an instance
filled before (`lazy.instance`, or through `__dict__` as rows are) is the same object after;
threads that need one at once all see it made. The CLI's writes and the takes-args-of
facades (store/signatures.py) load neither module."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import deliveries, inbox, lazy, models, tasks, watch
from mempalace_logstream.store import LogStore, filters
from mempalace_logstream.store.writes import Writes
from mempalace_logstream.tasks import TaskSettings
from tests.conftest import REPO
from tests.leankit import CODE, modules_after_import

DEFERRED = (
    tasks.Task,
    filters.Filters,
    filters.ReadRequest,
    inbox.InboxOptions,
    inbox.Unseen,
    watch.WatchOptions,
    watch.Batch,
    watch.Watcher,
    models.Event,
    models.Artifact,
    models.Page,
    models.EventDraft,
    models.ArtifactDraft,
    TaskSettings,
    deliveries.Life,
)


def fresh(frozen: bool = True) -> tuple[type[Any], type[Any]]:
    """(a deferred class, the same class made a dataclass at once), never used before."""
    fields = {"__annotations__": {"a": "int", "b": "str", "c": "tuple[int, ...]"}, "c": ()}
    deferred = type(
        "R", (lazy.Record,), {**fields, "b": lazy.field(default="x", metadata={"m": 1})}
    )
    eager = type("R", (), {**fields, "b": dataclasses.field(default="x", metadata={"m": 1})})
    options = {"frozen": frozen, "kw_only": True}
    return lazy.dataclass(**options)(deferred), dataclasses.dataclass(**options)(eager)


NEEDS = {
    "call": lambda cls: vars(cls(a=1)),
    "eq": lambda cls: cls(a=1) == cls(a=1),
    "hash": lambda cls: hash(cls(a=1, b="y")) == hash(cls(a=1, b="y")),
    "repr": lambda cls: repr(cls(a=1)).split("(", 1)[1],
    "fields": lambda cls: [f.name for f in dataclasses.fields(cls)],
    "replace": lambda cls: dataclasses.replace(cls(a=1), b="z").b,
    "asdict": lambda cls: dataclasses.asdict(cls(a=2)),
    "is_dataclass": dataclasses.is_dataclass,
    "match_args": lambda cls: cls.__match_args__,
    "params": lambda cls: cls.__dataclass_params__.frozen,
}


@pytest.mark.parametrize("need", sorted(NEEDS))
def test_each_need_makes_the_dataclass_an_eager_one_would_be(need: str) -> None:
    deferred, eager = fresh()
    assert NEEDS[need](deferred) == NEEDS[need](eager)
    assert dataclasses.is_dataclass(deferred)
    assert {f.name: f.metadata for f in dataclasses.fields(deferred)}["b"] == {"m": 1}
    assert not dataclasses.is_dataclass(lazy.Record)


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "mutable"])
def test_an_instance_filled_before_is_the_same_after(frozen: bool) -> None:
    deferred, eager = fresh(frozen)
    early = lazy.instance(deferred, a=1)
    assert vars(early) == vars(eager(a=1))  # each declared default, in order
    assert early == deferred(a=1) and repr(early) == repr(deferred(a=1))
    if frozen:
        with pytest.raises(dataclasses.FrozenInstanceError):
            early.a = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            del early.a
    else:
        early.a = 2  # a mutable one is assigned as any object
        assert early.a == 2
        with pytest.raises(TypeError, match="unhashable"):
            hash(early)


def test_an_assignment_to_a_mutable_one_needs_nothing() -> None:
    deferred, _eager = fresh(frozen=False)
    made = lazy.instance(deferred, a=1)
    made.a = 3
    assert made.a == 3
    assert "__dataclass_fields__" not in vars(deferred)  # not made for it


def test_instance_takes_what_init_takes() -> None:
    deferred, _eager = fresh()
    with pytest.raises(TypeError, match="needs a"):
        lazy.instance(deferred)
    with pytest.raises(TypeError, match="takes no"):
        lazy.instance(deferred, a=1, d=2)
    with pytest.raises(ValueError, match="holds exactly"):  # its __post_init__ runs
        lazy.instance(models.EventDraft, values={"type": "note"})


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "mutable"])
def test_replace_is_dataclasses_replace_without_making_the_class(frozen: bool) -> None:
    deferred, eager = fresh(frozen)
    early = lazy.instance(deferred, a=1, c=(2,))
    later = lazy.replace(early, b="z")
    assert "__dataclass_fields__" not in vars(deferred)  # not made for it
    assert vars(later) == vars(dataclasses.replace(eager(a=1, c=(2,)), b="z"))
    assert type(later) is deferred and vars(early) == vars(lazy.instance(deferred, a=1, c=(2,)))
    vars(early)["cached"] = 1  # what a cached_property keeps is not a field: not copied
    assert "cached" not in vars(lazy.replace(early))
    with pytest.raises(TypeError, match="takes no"):
        lazy.replace(early, d=1)
    with pytest.raises(TypeError, match=r"takes no \['d'\]$"):  # the fields named are fine
        lazy.replace(early, b="z", d=1)


def test_replace_runs_post_init() -> None:
    deferred, _eager = fresh()

    def refuse(self: Any) -> None:
        if self.b == "bad":
            raise ValueError("b refused")

    deferred.__post_init__ = refuse
    made = lazy.instance(deferred, a=1)
    with pytest.raises(ValueError, match="b refused"):
        lazy.replace(made, b="bad")


def test_a_default_factory_is_called_per_instance_and_given_to_dataclasses() -> None:
    body = {"__annotations__": {"a": "int", "d": "dict[str, int]"}}
    deferred = type("F", (lazy.Record,), {**body, "d": lazy.field(default_factory=dict)})
    lazy.dataclass(frozen=True)(deferred)
    one, two = lazy.instance(deferred, a=1), lazy.instance(deferred, a=1)
    assert one.d == {} and one.d is not two.d
    assert [(n, d) for n, d, _ in lazy.declared(deferred)] == [
        ("a", lazy.MISSING),
        ("d", lazy.MISSING),
    ]
    made = deferred(a=2)  # now a dataclass: its own __init__ calls the factory
    assert made.d == {} and made.d is not deferred(a=2).d
    assert dataclasses.fields(deferred)[1].default_factory is dict
    with pytest.raises(ValueError, match="both"):
        lazy.field(default=1, default_factory=dict)


def test_threads_that_need_it_at_once_all_see_it_made() -> None:
    for _round in range(20):
        deferred, eager = fresh()
        start = threading.Barrier(8)
        seen: list[Any] = []

        def need(
            cls: type[Any] = deferred, start: threading.Barrier = start, seen: list[Any] = seen
        ) -> None:
            start.wait(timeout=30)
            seen.append((cls(a=1) == cls(a=1), repr(cls(a=1)).split("(", 1)[1]))

        threads = [threading.Thread(target=need) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert seen == [(True, repr(eager(a=1)).split("(", 1)[1])] * 8


@pytest.mark.parametrize("cls", DEFERRED, ids=lambda c: c.__name__)
def test_declared_is_what_dataclasses_gives(cls: type[Any]) -> None:
    fields = dataclasses.fields(cls)
    assert [(n, d, dict(m)) for n, d, m in lazy.declared(cls)] == [
        (f.name, lazy.MISSING if f.default is dataclasses.MISSING else f.default, dict(f.metadata))
        for f in fields
    ]
    factories = {f.name: f.default_factory for f in fields}
    assert {n: f for n, f in factories.items() if f is not dataclasses.MISSING} == (
        {"filters": dict} if cls is watch.WatchOptions else {}
    )


def test_the_takes_args_of_signature_is_made_when_first_read() -> None:
    shown = inspect.signature(Writes.artifact_put)
    assert list(shown.parameters) == list(inspect.signature(Writes.draft_artifact).parameters)
    assert shown.return_annotation == "Artifact"
    assert isinstance(vars(Writes)["artifact_put"], type(lambda: None))  # the method itself


# ----------------------------------------------------------------------------- processes

NOT_LOADED = ("dataclasses", "inspect", "ast", "dis")


def test_importing_the_write_path_loads_no_dataclasses_or_inspect() -> None:
    write_path = ("mempalace_logstream.models", "mempalace_logstream.deliveries")
    write_path += ("mempalace_logstream.store.lean_write", "mempalace_logstream.tasks.settings")
    assert sorted(set(modules_after_import(*write_path)) & set(NOT_LOADED)) == []


def console(tmp_path: Path, *argv: str, code: str = CODE) -> tuple[list[str], str]:
    """(what the console script running `argv` on the test's log reports as `modules`, its
    stdout); `code` is the script (tests/leankit.py's CODE, or one reporting other names)."""
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOGSTREAM_", "MEMPALACE_"))}
    env.update(PYTHONPATH=str(REPO), LEAN_REPORT=str(report), HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", code, *argv, "--db", str(tmp_path / "log.sqlite3")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    got = json.loads(report.read_text())
    assert got["code"] in (0, None), done.stderr
    return got["modules"], done.stdout


def test_a_cli_append_and_ack_load_no_dataclasses_or_inspect(tmp_path: Path) -> None:
    LogStore.open(str(tmp_path / "log.sqlite3")).close()
    send = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a")
    loaded, out = console(tmp_path, *send, "--to-agent", "b", "--body", "hi", "--json")
    assert sorted(set(loaded) & set(NOT_LOADED)) == []
    event_id = json.loads(out)["event"]["id"]
    loaded, _out = console(tmp_path, "ack", event_id, "--from-agent", "b")
    assert sorted(set(loaded) & set(NOT_LOADED)) == []


def test_the_task_commands_and_inbox_load_no_dataclasses_or_inspect(tmp_path: Path) -> None:
    """A task's moves and status, and an inbox read, fill and replace their records with
    `lazy.instance`/`lazy.replace` (Task, TaskSettings, ReadRequest, InboxOptions, Unseen)."""
    LogStore.open(str(tmp_path / "log.sqlite3")).close()
    create = ("task", "create", "--project", "p", "--from-agent", "a", "--to-agent", "b")
    create += ("--branch", "main", "--base-commit", "abcdef1", "--goal", "g", "--done", "d")
    _loaded, out = console(tmp_path, *create, "--json")
    task_id = json.loads(out)["task_id"]
    state = str(tmp_path / "inbox.json")
    runs = {
        "claim": ("task", "claim", task_id, "--from-agent", "b"),
        "progress": ("task", "progress", task_id, "50", "--from-agent", "b"),
        "complete": ("task", "complete", task_id, "--from-agent", "b", "--body", "done"),
        "status": ("task", "status", task_id, "--json"),
        "inbox": ("inbox", "--agent", "b", "--from-start", "--state-file", state),
    }
    for name, argv in runs.items():
        loaded, out = console(tmp_path, *argv)
        assert (name, sorted(set(loaded) & set(NOT_LOADED))) == (name, [])
    assert json.loads(console(tmp_path, *runs["status"])[1])["task"]["state"] == "ready"
    assert task_id in out  # the inbox showed the request


# Runs the console script, then reports each NamedTuple or TypedDict of the package with an
# annotation typing had to compile (a `ForwardRef`: a string under `from __future__ import
# annotations`): the first `compile()` of a process costs ~10 M instructions (issue 25).
FORWARD_REFS = CODE.replace(
    '"modules": sorted(sys.modules)',
    """"modules": sorted(
        f"{m.__name__}.{c.__name__}"
        for m in list(sys.modules.values())
        if getattr(m, "__name__", "").startswith("mempalace_logstream")
        for c in list(vars(m).values())
        if isinstance(c, type) and c.__module__ == m.__name__
        and (hasattr(c, "_fields") or hasattr(c, "__required_keys__"))
        and any(isinstance(t, __import__("typing").ForwardRef)
                for t in c.__dict__.get("__annotations__", {}).values())
    )""",
)


def test_the_cli_paths_make_no_forward_ref(tmp_path: Path) -> None:
    LogStore.open(str(tmp_path / "log.sqlite3")).close()
    send = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "a")
    for argv in (
        (*send, "--to-agent", "b", "--body", "hi"),
        ("inbox", "--agent", "b", "--from-start", "--state-file", str(tmp_path / "s.json")),
    ):
        with_refs, _out = console(tmp_path, *argv, code=FORWARD_REFS)
        assert (argv[0], with_refs) == (argv[0], [])
