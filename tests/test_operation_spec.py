"""One operation spec (issue 21): each operation's parameters model (`op_params`) is the one
list of its parameters. The core functions, the MCP tools (the real SDK client), the HTTP routes
(the OpenAPI document of a real hub) and the CLI's options are held to it here, so a surface
whose parameter drifts (a rename, a new one, a lost description or required flag) fails.
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from mcp import Client
from mcp.types import ToolAnnotations

from mempalace_logstream import LogStore, mcp_server, operations, tasks, workflows
from mempalace_logstream import validation as v
from mempalace_logstream.models import EventArgs
from mempalace_logstream.presence import Registry
from mempalace_logstream.store import lease_ops, redaction
from mempalace_logstream.store.filters import ReadRequest
from mempalace_logstream.store.task_reads import TaskReads
from mempalace_logstream.store.writes import Writes
from tests.hubkit import live_hub

EVERY = operations.every_operation()


def _signature(fn: Any, drop: tuple[str, ...] = ()) -> dict[str, bool]:
    """{keyword parameter: required} of a core function (its store argument left out), or of
    the TypedDict its `**args` unpack (`models.EventArgs`)."""
    if typing.is_typeddict(fn):
        hints = typing.get_type_hints(fn, include_extras=True)
        return {k: typing.get_origin(h) is typing.Required for k, h in hints.items()}
    out = {}
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind is param.KEYWORD_ONLY and name not in drop:
            out[name] = param.default is inspect.Parameter.empty
    return out


@pytest.mark.parametrize("name", sorted(EVERY))
def test_every_operation_describes_itself_and_each_parameter(name: str) -> None:
    op = EVERY[name]
    assert len(op.description.split()) >= 12, name
    assert op.params.model_config.get("frozen") and op.params.model_config.get("extra") == "forbid"
    for param, field in op.params.model_fields.items():
        assert field.description, f"{name}.{param} has no description"


# The core function that takes each operation's keyword arguments, and what it takes besides.
CORE: dict[str, tuple[Any, tuple[str, ...]]] = {
    "event_append": (EventArgs, ()),  # what Writes.draft_event and event_append unpack
    "event_ack": (workflows.event_ack, ()),
    "event_redact": (redaction.event_redact, ()),
    "artifact_put": (Writes.draft_artifact, ("content_field",)),
    "patch_submit": (workflows.patch_submit, ()),
    "task_create": (workflows.task_create, ()),
    "task_update": (workflows.task_update, ()),
    "task_list": (TaskReads.task_list, ()),
    "presence_announce": (Registry.announce, ()),
    "lease_acquire": (lease_ops.lease_acquire, ()),
    "lease_renew": (lease_ops.lease_renew, ()),
    "lease_release": (lease_ops.lease_release, ()),
    "lease_list": (lease_ops.lease_list, ()),
    "lease_check": (lease_ops.lease_check, ()),
}


@pytest.mark.parametrize("name", sorted(CORE))
def test_the_core_functions_take_exactly_the_spec_parameters(name: str) -> None:
    fn, drop = CORE[name]
    assert _signature(fn, drop) == EVERY[name].required(), name


def test_the_reads_take_the_filters_and_the_read_request_fields() -> None:
    reads = set(ReadRequest.__dataclass_fields__) - {"filters"} | set(v.FILTER_FIELDS)
    listing = set(operations.params()["event_list"])
    assert set(v.FILTER_FIELDS) <= listing
    assert listing - {"from_agent"} <= reads
    assert set(operations.params()["event_wait"]) - {"from_agent", "timeout_ms"} <= reads


def test_mcp_tools_are_the_spec_names_types_descriptions_and_required(tmp_path: Path) -> None:
    async def tools() -> dict[str, Any]:
        with LogStore.open(str(tmp_path / "mcp.sqlite3")) as store:
            server = mcp_server.build_server(store, tools="all", presence=Registry())
            async with Client(server.protocol) as client:
                return {t.name: t for t in (await client.list_tools()).tools}

    listed = asyncio.run(asyncio.wait_for(tools(), 60))
    assert set(listed) == {f"mempalace_{name}" for name in EVERY}
    for name, op in EVERY.items():
        tool = listed[f"mempalace_{name}"]
        full = op.params.model_json_schema()["properties"]
        props = tool.input_schema["properties"]
        assert props == op.params.tool_schema()["properties"], name
        assert list(props) == list(full), name
        for param, field in op.params.model_fields.items():
            assert props[param]["description"] == field.description, (name, param)
        assert set(tool.input_schema.get("required", [])) == {
            p for p, needed in op.required().items() if needed
        }, name
        assert tool.description == op.description, name
        hints = tool.annotations or ToolAnnotations()  # none: MCP's defaults (a destructive write)
        assert bool(hints.read_only_hint) is (not op.mutating), name
        appends = op.mutating and not op.destructive  # a write that destroys nothing says so
        assert hints.destructive_hint is (False if appends else None), name


def test_http_routes_take_the_spec_parameters_with_their_descriptions(tmp_path: Path) -> None:
    with live_hub(tmp_path) as hub, httpx.Client(base_url=hub.url, timeout=30) as http:
        doc = http.get("/openapi.json").json()
    models = doc["components"]["schemas"]
    for name, op in operations.OPERATIONS.items():
        post = doc["paths"][f"/v1/{name}"]["post"]
        assert post["description"] == op.description, name
        ref = post.get("requestBody", {}).get("content", {}).get("application/json", {})
        props = models[ref["schema"]["$ref"].rsplit("/", 1)[1]] if ref else {"properties": {}}
        assert set(props["properties"]) == set(op.required()), name
        for param, field in op.params.model_fields.items():
            assert props["properties"][param]["description"] == field.description, (name, param)
        needed = {p for p, req in op.required().items() if req} - set(operations.WRITER_FIELDS)
        assert set(props.get("required", [])) == needed, name


# --------------------------------------------------------------------------------- the CLI
# The CLI keeps hand-written commands for their ergonomics; their options are the spec's
# parameters under the same names, except the renames below (a file instead of text, one
# repeatable option for a list), each naming the spec parameter it feeds.
TRANSPORT = {"db", "palace", "hub", "token", "as_json", "give_up_after"}
TASK_MOVE = {
    "body_file": "body",
    "progress_option": "progress",
    "disposition": "result",
    "verification": "result",
    "artifact_id": "artifact_ids",
}
COMMANDS: dict[str, tuple[str, dict[str, str]]] = {
    "append": ("event_append", {"body_file": "body", "artifact_id": "artifact_ids"}),
    "list": ("event_list", {}),
    "get": ("event_get", {}),
    "ack": ("event_ack", {"body_file": "body"}),
    "redact": ("event_redact", {"artifact": "artifact_ids"}),
    "stats": ("stats", {}),
    "wait": ("event_wait", {}),
    "artifact put": ("artifact_put", {"file": "content", "binary": "encoding"}),
    "artifact get": ("artifact_get", {"out_file": "", "force": ""}),  # where the bytes go
    "patch submit": ("patch_submit", {"file": "content"}),
    "task create": (
        "task_create",
        {"goal_file": "goal", "done_file": "done", "parent": "parent_task_id"},
    ),
    **{f"task {action}": ("task_update", TASK_MOVE) for action in tasks.ACTIONS},
    "task status": ("task_status", {}),
    "task list": ("task_list", {"parent": "parent_task_id"}),
    "delivery": ("delivery_status", {}),
    "lease acquire": (
        "lease_acquire",
        {"shared": "exclusive", "ttl": "ttl_s", "task": "task_id"},
    ),
    "lease renew": ("lease_renew", {"ttl": "ttl_s"}),
    "lease release": ("lease_release", {}),
    "lease list": ("lease_list", {"all_": "active"}),
    "lease check": ("lease_check", {}),
    "presence announce": ("presence_announce", {}),
    "presence leave": ("presence_leave", {}),
    "presence list": ("presence_list", {}),
}


def _cli_commands() -> dict[str, list[str]]:
    from mempalace_logstream import cli

    out: dict[str, list[str]] = {}

    def walk(command: Any, prefix: str) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, f"{prefix} {name}".strip())
        else:
            out[prefix] = [p.name for p in command.params]

    walk(typer.main.get_command(cli.app), "")
    return out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cli_options_are_the_spec_parameters_or_a_named_rename(command: str) -> None:
    op_name, renames = COMMANDS[command]
    spec = EVERY[op_name].required()
    options = set(_cli_commands()[command]) - TRANSPORT
    strays = {o for o in options if o not in spec and o not in renames}
    assert not strays, f"`logstream {command}` options {strays} are not parameters of {op_name}"
    for option, target in renames.items():
        assert target == "" or target in spec, f"{option} feeds {target}, not in {op_name}"
    reached = options | {t for t in renames.values() if t} | {"action"}
    missing = {p for p, needed in spec.items() if needed} - reached
    assert not missing, f"`logstream {command}` cannot give {op_name}'s {missing}"


def test_every_named_rename_is_still_an_option() -> None:
    commands = _cli_commands()
    for command, (_op, renames) in COMMANDS.items():
        unused = set(renames) - {
            o for c, (_, r) in COMMANDS.items() if r is renames for o in commands[c]
        }
        assert not unused, f"{command}: no command has {unused} any more"


def test_every_operation_has_a_cli_command() -> None:
    assert {op for op, _ in COMMANDS.values()} == set(EVERY) - {"version_vector"}
