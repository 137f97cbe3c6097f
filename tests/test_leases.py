"""File leases on one store (issue 22, RFC 0010), SQLite and PostgreSQL, with a manual clock:
acquire, overlap refusals naming the holder, shared leases, expiry derived from the clock,
renew, release (by the holder, the admin, or the end of the lease's task), fencing tokens per
project, identity, and the CLI's exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mempalace_logstream import LogStore, errors, operations, workflows
from mempalace_logstream.identity import actor
from mempalace_logstream.store import lease_ops as ops
from tests.conftest import ManualClock, run_cli


@pytest.fixture
def store(log_url: str, clock: ManualClock) -> Iterator[LogStore]:
    s = LogStore.open(log_url, clock=clock)
    yield s
    s.close()


def acquire(store: LogStore, agent: str, *paths: str, **kw: object) -> dict[str, object]:
    kw.setdefault("project", "demo")
    return ops.lease_acquire(store, agent=agent, paths=list(paths), **kw)["lease"]


def test_an_overlapping_acquire_is_refused_naming_holder_globs_and_expiry(
    store: LogStore,
) -> None:
    held = acquire(store, "claude", "src/**", reason="auth refactor", ttl_s=600)
    assert (held["state"], held["fence"], held["paths"]) == ("active", 1, ["src/**"])
    before = store.stats()["events"]
    with pytest.raises(errors.ConflictError) as info:
        acquire(store, "codex", "*.py", "docs/**")
    assert str(info.value) == (
        f"**/*.py overlaps src/**, leased exclusively to claude until {held['expires_at']} "
        f"(lease {held['lease_id']}, fence 1: auth refactor); acquire refused"
    )
    assert info.value.field == "paths"
    assert store.stats()["events"] == before  # nothing written
    # another project, a disjoint tree, the holder itself: all fine
    assert acquire(store, "codex", "src/**", project="other")["fence"] == 1
    assert acquire(store, "codex", "docs/**")["fence"] == 2
    assert acquire(store, "claude", "src/auth.py")["fence"] == 3


def test_shared_leases_coexist_and_an_exclusive_one_is_refused_by_them(store: LogStore) -> None:
    a = acquire(store, "claude", "docs/**", exclusive=False)
    acquire(store, "codex", "docs/api.md", exclusive=False)
    with pytest.raises(errors.ConflictError, match=f"leased shared to claude .*{a['lease_id']}"):
        acquire(store, "gemini", "docs/")
    check = ops.lease_check(store, agent="gemini", path="docs/api.md")
    assert check["allowed"] and check["held_by"] == []  # a shared lease does not stop an edit


def test_expiry_is_derived_from_the_clock_and_renew_extends_it(
    store: LogStore, clock: ManualClock
) -> None:
    held = acquire(store, "claude", "src/**", ttl_s=60)
    clock.advance(30_000)
    renewed = ops.lease_renew(store, lease_id=held["lease_id"], agent="claude", ttl_s=60)["lease"]
    assert renewed["expires_at"] > held["expires_at"]
    clock.advance(59_000)
    assert not ops.lease_check(store, agent="codex", path="src/a.py")["allowed"]
    clock.advance(2_000)  # past the renewed expiry: nothing was written, it simply expired
    assert ops.lease_list(store)["leases"] == []
    gone = ops.lease_list(store, active=False)["leases"]
    assert [x["state"] for x in gone] == ["expired"]
    check = ops.lease_check(store, agent="codex", path="src/a.py")
    assert check == {**check, "allowed": True, "message": None}
    with pytest.raises(errors.ConflictError) as info:
        ops.lease_renew(store, lease_id=held["lease_id"], agent="claude")
    assert str(info.value) == (
        f"lease {held['lease_id']} expired at {renewed['expires_at']}; renew refused; acquire again"
    )
    assert acquire(store, "codex", "src/a.py")["agent"] == "codex"


def test_release_by_the_holder_or_the_admin_and_never_by_another(store: LogStore) -> None:
    held = acquire(store, "claude", "src/**")
    with pytest.raises(errors.ForbiddenError) as info:
        ops.lease_release(store, lease_id=held["lease_id"], agent="codex")
    assert str(info.value) == (
        f"lease {held['lease_id']} is held by claude; only its holder (or the admin for a "
        "release) may release it"
    )
    with pytest.raises(errors.ForbiddenError):
        ops.lease_renew(store, lease_id=held["lease_id"], agent="admin")  # admin: release only
    out = ops.lease_release(store, lease_id=held["lease_id"], agent="claude")["lease"]
    assert (out["state"], out["released_by"]) == ("released", "claude")
    with pytest.raises(errors.ConflictError, match="was released by claude; release refused"):
        ops.lease_release(store, lease_id=held["lease_id"], agent="claude")
    second = acquire(store, "codex", "src/a.py")
    out = ops.lease_release(store, lease_id=second["lease_id"], agent="admin")["lease"]
    assert out["released_by"] == "admin"
    events = store.event_list(type="lease.release", order="asc").events
    assert [(e.from_agent, e.metadata["lease_id"]) for e in events][-1] == (
        "admin",
        second["lease_id"],
    )
    with pytest.raises(errors.NotFoundError, match="lease evt_nope not found"):
        ops.lease_release(store, lease_id="evt_nope", agent="claude")


def _task(store: LogStore) -> str:
    out = workflows.task_create(
        store,
        project="demo",
        from_agent="lead",
        to_agent="*",
        goal="auth",
        branch="main",
        base_commit="abcdef1",
        done="tests pass",
    )
    tid = str(out["task_id"])
    workflows.task_update(store, task_id=tid, action="claim", from_agent="claude")
    return tid


@pytest.mark.parametrize("ending", ["cancel", "accept"])
def test_a_tasks_leases_end_with_the_task(store: LogStore, ending: str) -> None:
    tid = _task(store)
    held = ops.lease_acquire(store, agent="claude", paths=["src/**"], task_id=tid)["lease"]
    assert (held["project"], held["task_id"]) == ("project/demo", tid)
    with pytest.raises(errors.ConflictError, match=f"task {tid}"):
        acquire(store, "codex", "src/a.py")
    if ending == "accept":
        result = {"disposition": "no_artifact"}
        workflows.task_update(
            store, task_id=tid, action="complete", from_agent="claude", result=result
        )
    workflows.task_update(store, task_id=tid, action=ending, from_agent="lead")
    [after] = ops.lease_list(store, active=False, agent="claude")["leases"]
    assert (after["state"], after["released_by"]) == ("released", "task")
    assert acquire(store, "codex", "src/a.py")["agent"] == "codex"
    with pytest.raises(errors.ConflictError, match=f"ended with its task {tid}; renew refused"):
        ops.lease_renew(store, lease_id=held["lease_id"], agent="claude")


def test_a_task_and_another_project_are_refused(store: LogStore) -> None:
    tid = _task(store)
    with pytest.raises(errors.ValidationError) as info:
        ops.lease_acquire(store, agent="claude", paths=["a"], task_id=tid, project="other")
    assert str(info.value) == (
        f"project 'project/other' is not the project of task {tid} (project/demo)"
    )


def test_the_broadcast_address_holds_no_lease(store: LogStore) -> None:
    held = acquire(store, "claude", "src/a.py")
    calls = (
        lambda: ops.lease_acquire(store, agent="*", paths=["b"], project="demo"),
        lambda: ops.lease_renew(store, lease_id=held["lease_id"], agent="*"),
        lambda: ops.lease_release(store, lease_id=held["lease_id"], agent="*"),
    )
    before = store.stats()["events"]
    for call in calls:
        with pytest.raises(errors.ValidationError) as info:
            call()
        assert info.value.field == "agent"
        assert (
            str(info.value)
            == "agent is '*', the broadcast address; a writer writes under its own name"
        )
    assert store.stats()["events"] == before


def test_a_raw_lease_event_without_its_metadata_is_refused(store: LogStore) -> None:
    with pytest.raises(errors.ValidationError) as info:
        store.event_append(type="lease.acquire", stream="project/demo", room="r", from_agent="x")
    assert info.value.field == "metadata"
    assert store.stats()["events"] == 0


def test_an_agent_token_leases_for_itself_only(store: LogStore) -> None:
    theirs = acquire(store, "claude", "b")
    moves = (
        ("lease_acquire", {"paths": ["a"], "project": "p"}),
        ("lease_renew", {"lease_id": theirs["lease_id"]}),
        ("lease_release", {"lease_id": theirs["lease_id"]}),
    )
    before = store.stats()["events"]
    with actor.acting_as(actor.Actor(agent="codex")):
        for op, args in moves:  # refused naming the parameter given, `agent`
            with pytest.raises(errors.ForbiddenError) as info:
                operations.call(store, op, {**args, "agent": "claude"})
            assert info.value.field == "agent", op
            assert "an agent writes as itself only" in str(info.value)
        assert store.stats()["events"] == before
        out = operations.call(
            store, "lease_acquire", {"agent": "codex", "paths": ["a"], "project": "p"}
        )
    assert out["lease"]["agent"] == "codex"


def test_list_filters_by_agent_path_and_project(store: LogStore) -> None:
    a = acquire(store, "claude", "src/**")
    b = acquire(store, "codex", "docs/**")
    c = acquire(store, "codex", "src/**", project="other")
    ids = lambda out: [x["lease_id"] for x in out["leases"]]  # noqa: E731
    assert ids(ops.lease_list(store)) == [c["lease_id"], b["lease_id"], a["lease_id"]]
    assert ids(ops.lease_list(store, agent="codex", project="demo")) == [b["lease_id"]]
    assert ids(ops.lease_list(store, path="src/x/y.py")) == [c["lease_id"], a["lease_id"]]


def test_the_cli_acquires_checks_lists_and_releases(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    base = ("--db", db)
    got = run_cli(
        "lease",
        "acquire",
        "src/**",
        "--agent",
        "claude",
        "--project",
        "demo",
        "--reason",
        "refactor",
        "--ttl",
        "600",
        *base,
    )
    assert got.returncode == 0, got.stderr
    lease_id = got.stdout.decode().strip()
    assert lease_id.startswith("evt_")
    mine = run_cli("lease", "check", "src/a.py", "--agent", "claude", *base)
    assert mine.returncode == 0 and b"free for claude" in mine.stdout
    theirs = run_cli("lease", "check", "src/a.py", "--agent", "codex", "--json", *base)
    out = json.loads(theirs.stdout)
    assert theirs.returncode == 1 and out["allowed"] is False
    assert out["message"].startswith("src/a.py is leased to claude until ")
    refused = run_cli("lease", "acquire", "*.py", "--agent", "codex", "--project", "demo", *base)
    assert refused.returncode == 1 and b"leased exclusively to claude" in refused.stderr
    listed = run_cli("lease", "list", "--path", "src/a.py", *base)
    assert listed.returncode == 0 and lease_id.encode() in listed.stdout
    gone = run_cli("lease", "release", lease_id, "--agent", "claude", *base)
    assert gone.returncode == 0 and b"released" in gone.stdout
    free = run_cli("lease", "check", "src/a.py", "--agent", "codex", *base)
    assert free.returncode == 0


def test_the_mcp_tools_acquire_refuse_and_check_as_the_core(tmp_path: Path) -> None:
    import asyncio

    from mcp import Client

    from mempalace_logstream import mcp_server

    def data(result: Any) -> dict[str, Any]:
        if result.structured_content is not None:
            return dict(result.structured_content)
        return dict(json.loads(result.content[0].text))

    async def scenario() -> None:
        with LogStore.open(str(tmp_path / "mcp.sqlite3")) as store:
            server = mcp_server.build_server(store, tools="coord,leases")
            async with Client(server.protocol) as client:
                args = {"agent": "claude", "paths": ["src/**"], "project": "demo"}
                held = data(await client.call_tool("mempalace_lease_acquire", args))["lease"]
                other = {**args, "agent": "codex", "paths": ["src/a.py"]}
                refused = await client.call_tool("mempalace_lease_acquire", other)
                assert refused.is_error is True
                assert f"leased exclusively to claude until {held['expires_at']}" in (
                    refused.content[0].text
                )
                check = {"agent": "codex", "path": "src/a.py", "project": "demo"}
                out = data(await client.call_tool("mempalace_lease_check", check))
                assert out["allowed"] is False and out["held_by"][0]["lease_id"] == held["lease_id"]
                release = {"lease_id": held["lease_id"], "agent": "claude"}
                gone = data(await client.call_tool("mempalace_lease_release", release))
                assert gone["lease"]["state"] == "released"
                listed = data(await client.call_tool("mempalace_lease_list", {}))
                assert listed == {"leases": [], "count": 0}

    asyncio.run(scenario())


def test_the_admin_name_of_the_lease_rules_is_identitys() -> None:
    from mempalace_logstream.leases import rules

    assert rules.ADMIN_NAME == actor.ADMIN_NAME
