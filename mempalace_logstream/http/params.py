"""Request parameters: the JSON-schema of each core argument, the permissive request models of
the `POST /v1/<op>` routes, and query strings turned into core arguments (GET aliases, SSE).

The models document the spec's types and descriptions (`op_params`) for OpenAPI; the core
(`operations.check_args`, `validation`) checks the values.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.requests import Request

from mempalace_logstream import errors, operations
from mempalace_logstream import validation as v

_STR: dict[str, Any] = {"type": "string"}


def field_schemas(op: operations.Operation) -> dict[str, dict[str, Any]]:
    """{parameter: its JSON schema} from the operation's spec: type, description, bounds."""
    props = op.params.model_json_schema().get("properties", {})
    return {
        name: {k: val for k, val in schema.items() if k not in ("title", "default")}
        for name, schema in props.items()
    }


def request_model(name: str, op: operations.Operation) -> type[BaseModel]:
    """A permissive pydantic model: the schema (from the spec) documents the parameters, the
    core validates the values (so HTTP refuses with the core's texts, as MCP and the CLI do)."""
    fields: dict[str, Any] = {}
    schemas = field_schemas(op)
    for param, required in op.required().items():
        annotated = Annotated[Any, Field(json_schema_extra=schemas[param])]
        # The writer's name may be left out by an agent's token (the core fills it in).
        needed = required and param not in operations.WRITER_FIELDS
        fields[param] = (annotated, ...) if needed else (annotated, None)
    title = "".join(part.title() for part in name.split("_")) + "Request"
    config = ConfigDict(extra="forbid")
    model: type[BaseModel] = create_model(
        title, __config__=config, __doc__=op.description, **fields
    )
    return model


# The query-string parameters of the reads (GET /v1/events, the SSE feed), from the spec.
QUERY_SCHEMAS: dict[str, dict[str, Any]] = {
    **field_schemas(operations.OPERATIONS["event_wait"]),
    **field_schemas(operations.OPERATIONS["event_list"]),
    "presence": {"type": "boolean", "description": "Also carry presence frames."},  # SSE only
}


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
            schema = QUERY_SCHEMAS.get(name, _STR)
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
