"""What the write commands (`append`, `ack`, `task create`, the task moves) and `task status`
share between their typer commands and the fast path (`cli/fast.py`), without typer: reading
`--body-file` and the like, the arguments of the core call, and the printed answers (issue 25).
One implementation each, so both paths send the same call and print the same bytes. And the
fast path's write itself (`fast_write`): a write is never made twice.

A refused input (a file that cannot be read, two values for one thing) is a `Refusal`: the
typer commands turn it into `shared.fail`, the fast path prints the same line with
`plain.error_text`.

Must not import typer, click, rich, the store or SQLAlchemy.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Mapping
from typing import Any

from mempalace_logstream import display, errors
from mempalace_logstream.cli import plain
from mempalace_logstream.cli.plain import event_line, given_args

# What the fast path read of stdin (`--body-file -`), to give back if it hands the command
# line to typer, which reads it again (`give_back_stdin`).
_STDIN_READ: list[bytes] = []


class Refusal(Exception):
    """An input refused before any call is made: one line on stderr, exit `code` (2 for a
    usage error), the error's `field` in the --json form."""

    def __init__(self, message: str, code: int = 1, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.field = message, code, field


# ----------------------------------------------------------------------------- input


def read_bytes(path: str, field: str) -> bytes:
    """Exact bytes from a file or `-` (stdin); no newline translation."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
            _STDIN_READ.append(data)
            return data
        with open(path, "rb") as f:  # no pathlib: a fast write does not load it
            return f.read()
    except OSError as exc:
        raise Refusal(f"{field}: cannot read {path}: {exc.strerror}") from None


def read_text(path: str, field: str) -> str:
    """A file's (or stdin's) text, refused unless it is valid UTF-8."""
    raw = read_bytes(path, field)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refusal(f"{field} is not valid UTF-8 ({path})") from None


def text_arg(
    value: str | None, file: str | None, field: str, *, required: bool = False
) -> str | None:
    """The value of `--field` or of `--field-file` (never both; one of them when required)."""
    if value is not None and file is not None:
        raise Refusal(f"give --{field} or --{field}-file, not both", 2)
    if file is not None:
        return read_text(file, field)
    if value is None and required:
        raise Refusal(f"--{field} or --{field}-file is required", 2)
    return value


def give_back_stdin() -> None:
    """Put back what was read of stdin: the fast path hands a command line it read to the
    typer app, which reads `--body-file -` again, and must find the same bytes (as before, a
    second read of stdin in one run finds it empty)."""
    if _STDIN_READ:
        data = b"".join(_STDIN_READ)
        _STDIN_READ.clear()
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


# ----------------------------------------------------------------------------- arguments


def append_args(p: Mapping[str, Any]) -> dict[str, Any]:
    """`logstream append`'s arguments of `event_append`, from the command's parameters."""
    return {
        "type": p["type"],
        "stream": p["stream"],
        "room": p["room"],
        "from_agent": p["from_agent"],
        "to_agent": p["to_agent"],
        "topic": p["topic"],
        "correlation_id": p["correlation_id"],
        "branch": p["branch"],
        "base_commit": p["base_commit"],
        "status": p["status"],
        "body": text_arg(p["body"], p["body_file"], "body") or "",
        "metadata": p["metadata"],
        "artifact_ids": p["artifact_id"],
        "idempotency_key": p["idempotency_key"],
    }


def ack_args(p: Mapping[str, Any]) -> dict[str, Any]:
    """`logstream ack`'s arguments of `event_ack`."""
    return {
        "event_id": p["event_id"],
        "from_agent": p["from_agent"],
        "status": p["status"],
        "body": text_arg(p["body"], p["body_file"], "body") or "",
        "topic": p["topic"],
    }


def create_args(p: Mapping[str, Any]) -> dict[str, Any]:
    """`logstream task create`'s arguments of `task_create`."""
    return given_args(
        project=p["project"],
        from_agent=p["from_agent"],
        to_agent=p["to_agent"],
        goal=text_arg(p["goal"], p["goal_file"], "goal", required=True),
        branch=p["branch"],
        base_commit=p["base_commit"],
        done=text_arg(p["done"], p["done_file"], "done", required=True),
        parent_task_id=p["parent"],
        parent_correlation_id=p["parent_correlation_id"],
        lease_ms=p["lease_ms"],
        claim_timeout_ms=p["claim_timeout_ms"],
        max_reminders=p["max_reminders"],
        thread_budget=p["thread_budget"],
    )


def move_args(action: str, p: Mapping[str, Any]) -> dict[str, Any]:
    """`logstream task ACTION`'s arguments of `task_update` (a move takes only some of the
    parameters: the others are absent from `p`)."""
    result = None
    disposition, verification = p.get("disposition"), p.get("verification")
    if disposition is not None or verification:
        result = given_args(disposition=disposition, verification=_verification(verification))
    return given_args(
        task_id=p["task_id"],
        action=action,
        from_agent=p["from_agent"],
        body=text_arg(p.get("body"), p.get("body_file"), "body"),
        progress=_progress(p),
        lease_ms=p.get("lease_ms"),
        retryable=True if p.get("retryable") else None,
        result=result,
        artifact_ids=p.get("artifact_id") or None,
    )


def _verification(items: list[str] | None) -> list[dict[str, str]] | None:
    if not items:
        return None
    out = []
    for item in items:
        name, sep, status = item.rpartition("=")
        if not sep or not name:
            raise Refusal(f"--verification {item!r} must be NAME=STATUS", 2, "verification")
        out.append({"name": name, "status": status})
    return out


def _progress(p: Mapping[str, Any]) -> float | None:
    value, option = p.get("progress"), p.get("progress_option")
    if value is not None and option is not None and value != option:
        raise Refusal("give the progress once: as an argument or as --progress", 2, "progress")
    return value if value is not None else option


# ----------------------------------------------------------------------------- the fast path


def fast_write(
    p: dict[str, Any],
    op: str,
    build: Callable[[Mapping[str, Any]], dict[str, Any]],
    text: Callable[[dict[str, Any]], str],
    warn: bool = False,
) -> int | None:
    """A write command of the fast path (cli/fast.py): its arguments, one call, the answer
    printed as the typer command prints it (`p`: the command's parameters, with the root's
    --debug and --durability). Until the call is made, anything this path does not do goes
    to typer (None, what it read of stdin given back). Once a call may have reached the log,
    it is never handed over (typer would write it twice): the outcome is told here, an error
    as the one line `shared.run` (or the typer app's outermost edge) prints, exit 1 (Ctrl-C:
    cli/fast.py `run` ends it as typer does)."""
    if p["debug"]:
        return None  # tracebacks are typer's
    try:
        args = build(p)
    except Refusal as exc:
        _err(plain.error_text(exc.message, exc.field, p["as_json"]))
        return exc.code
    try:
        if p["hub"]:
            out = plain.hub_call(p["hub"], p["token"], op, args)
        else:
            local = plain.local_write(p["db"], p["palace"], p["durability"], op, args)
            if local is None:
                give_back_stdin()
                return None
            out = local
    except errors.LogstreamError as exc:
        _err(plain.error_text(exc.message, getattr(exc, "field", None), p["as_json"]))
        return 1
    except Exception as exc:  # noqa: BLE001 - the typer app's outermost edge says the same
        _err(plain.error_text(plain.unexpected_text(exc), None, p["as_json"]))
        return 1
    sys.stdout.write(plain.emit_text(out, p["as_json"], text(out)) + "\n")
    sys.stdout.flush()
    note = warning_text(out) if warn else None
    if note:
        _err(display.terminal(note))
    return 0


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


# ----------------------------------------------------------------------------- answers


def appended_text(out: dict[str, Any]) -> str:
    """`logstream append`'s human answer."""
    return "Appended: " + event_line(out["event"])


def acked_text(out: dict[str, Any]) -> str:
    """`logstream ack`'s human answer."""
    return "Acked: " + event_line(out["event"])


def warning_text(out: dict[str, Any]) -> str | None:
    """An answer's `warning` (the addressee has no live delivery path), raw: the printer
    escapes it (`display.terminal`)."""
    return f"warning: {out['warning']}" if out.get("warning") else None


def created_text(out: dict[str, Any]) -> str:
    """`logstream task create`'s human answer: the task and the handoff line to paste."""
    t = out["task"]
    lines = (
        f"Task created: {t['correlation_id']} (the task id is the correlation id)",
        f"Stream: {t['stream']}",
        f"Event: {t['id']}",
        f"To: {t['to_agent']}",
        "Ready to paste:",
        out["handoff"],
    )
    return "\n".join(lines)


def task_line(t: dict[str, Any]) -> str:
    """A task on one line: id, state, who holds it, attempt, progress, lease."""
    who = f" held by {t['assignee']}" if t.get("assignee") else ""
    extra = f" (attempt {t['attempt']})" if t.get("attempt") else ""
    if t.get("progress") is not None:
        extra += f", progress {t['progress']:g}"
    if t.get("lease_expires_at"):
        extra += f", lease until {t['lease_expires_at']}"
    return f"{t['task_id']}: {t['state']}{who}{extra}"


def moved_text(out: dict[str, Any]) -> str:
    """A task move's human answer."""
    return task_line(out["task"])


def status_text(out: dict[str, Any]) -> str:
    """`logstream task status`'s human answer."""
    t = out["task"]
    lines = [task_line(t), f"requested by {t['requester']} for {t['to_agent']}"]
    lines += _text_lines("goal", t.get("goal"))
    lines += _text_lines("done", t.get("done"))
    lines += _text_lines("question", t.get("question"))
    lines += [
        f"lost: attempt {x['attempt']} ({x['assignee']}), lease expired at {x['expired_at']}"
        for x in t["lost"]
    ]
    if t.get("parent_task_id"):
        lines.append(f"parent: {t['parent_task_id']} (depth {t['depth']})")
    lines += [f"child: {c['task_id']} ({c['state']})" for c in t["children"]]
    if t.get("result"):
        r = t["result"]
        lines.append(f"result: {r['disposition']}, artifacts {', '.join(r['artifact_ids']) or '-'}")
    lines += [f"conflict: {c['agent']} lost to {c['lost_to']}" for c in t["conflicts"]]
    lines += [f"anomaly: {a['action']} by {a['agent']}: {a['reason']}" for a in t["anomalies"]]
    lines.append(f"{len(t['events'])} event(s), {len(t['artifacts'])} artifact(s)")
    lines += [_delivery_line(row) for row in t.get("delivery", [])]
    return "\n".join(lines)


def _delivery_line(row: dict[str, Any]) -> str:
    """The request's delivery to one recipient (the delivery ledger, `logstream delivery`)."""
    parts = [f"pushed {row['pushed_at']} ({row['pushed_path']})"] if row["pushed_at"] else []
    parts += [f"seen {row['seen_at']}"] if row["seen_at"] else ["not seen"]
    parts += [f"acked {row['acked_at']}"] if row["acked_at"] else []
    return f"delivery to {row['recipient']}: " + ", ".join(parts)


def _text_lines(label: str, text: str | None) -> list[str]:
    """`label: first line`, the next lines indented under it."""
    if not text:
        return []
    first, *rest = text.splitlines() or [""]
    return [f"{label}: {first}", *(f"  {line}" for line in rest)]
