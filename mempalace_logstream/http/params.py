"""Request parameters: the JSON-schema of each core argument, the permissive request models of
the `POST /v1/<op>` routes, and query strings turned into core arguments (GET aliases, SSE).

The models document types for OpenAPI; the core (`operations.check_args`, `validation`) checks
the values.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.requests import Request

from mempalace_logstream import errors, operations, tasks
from mempalace_logstream import validation as v

_STR: dict[str, Any] = {"type": "string"}
_FILTER: dict[str, Any] = {"anyOf": [_STR, {"type": "array", "items": _STR}]}
PARAM_SCHEMAS: dict[str, dict[str, Any]] = {
    **{name: _FILTER for name in v.FILTER_FIELDS},
    "limit": {"type": "integer", "minimum": 1, "maximum": v.MAX_LIST_LIMIT},
    "timeout_ms": {"type": "integer", "minimum": 0, "maximum": v.MAX_WAIT_MS},
    "preview": {"type": "boolean"},
    "slim": {"type": "boolean"},
    "presence": {"type": "boolean"},  # the SSE feed: also carry presence frames
    "order": {"type": "string", "enum": list(v.ORDERS)},
    "metadata": {"anyOf": [{"type": "object"}, _STR]},
    "artifact_ids": {"type": "array", "items": _STR},
    "encoding": {"type": "string", "enum": list(v.ENCODINGS)},
    "action": {"type": "string", "enum": list(tasks.ACTIONS)},
    "state": {"type": "string", "enum": list(tasks.STATES)},
    "progress": {"type": "number"},
    "lease_ms": {"type": "integer"},
    "retryable": {"type": "boolean"},
    "result": {"type": "object"},
}


def request_model(op: str, params: dict[str, bool]) -> type[BaseModel]:
    """A permissive pydantic model: the schema documents types, the core validates values."""
    fields: dict[str, Any] = {}
    for name, required in params.items():
        schema = PARAM_SCHEMAS.get(name, _STR)
        annotated = Annotated[Any, Field(json_schema_extra=schema)]
        # The writer's name may be left out by an agent's token (the core fills it in).
        needed = required and name not in operations.WRITER_FIELDS
        fields[name] = (annotated, ...) if needed else (annotated, None)
    name = "".join(part.title() for part in op.split("_")) + "Request"
    model: type[BaseModel] = create_model(name, __config__=ConfigDict(extra="forbid"), **fields)
    return model


def query_args(
    request: Request, allowed: tuple[str, ...], multi: tuple[str, ...]
) -> dict[str, Any]:
    """Query parameters as core arguments: repeatable filters become lists; unknown names fail."""
    args: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        if name not in allowed:
            raise errors.ValidationError(f"{name} is not a parameter of this endpoint", field=name)
        if not value.strip():
            # `to_agent=` is a mistake, never "no filter": it would stream everyone's mail.
            raise errors.ValidationError(
                f"{name} is empty; give a value or leave the parameter out", field=name
            )
        if name in multi:
            args.setdefault(name, []).append(value)
        elif name in args:
            raise errors.ValidationError(f"{name} may be given only once", field=name)
        else:
            args[name] = value
    return args


def query_docs(names: tuple[str, ...]) -> dict[str, Any]:
    """OpenAPI `parameters` for query-string arguments (filters are repeatable arrays)."""
    params = []
    for name in names:
        if name in v.FILTER_FIELDS:
            schema: dict[str, Any] = {"type": "array", "items": _STR}
        else:
            schema = PARAM_SCHEMAS.get(name, _STR)
        params.append(
            {
                "name": name,
                "in": "query",
                "required": False,
                "schema": schema,
                "style": "form",
                "explode": True,
            }
        )
    return {"parameters": params}
