"""What a harness is about to edit, and the decision it is told (issue 22, RFC 0010). Pure: the
standard library only (the PreToolUse hook runs it on every edit).

Claude Code sends `{"tool_name", "tool_input", "cwd", ...}` on stdin; Edit, Write, MultiEdit
and NotebookEdit name the file in `tool_input.file_path` (`notebook_path`), absolute; Bash
gives `tool_input.command`, parsed best-effort for redirections and `sed -i`, `mv`, `rm`,
`cp`, `tee` targets. Codex sends the same envelope for `apply_patch`, the patch text in
`tool_input.command` (`*** Update File: p`, `*** Add File: p`, `*** Delete File: p`,
`*** Move to: p`). Both read a deny as `{"hookSpecificOutput": {"hookEventName":
"PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": ...}}` on stdout,
exit 0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

CLIENTS = ("claude", "codex")
FILE_TOOLS = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path"}
NOTEBOOK_TOOL = "NotebookEdit"
PATCH_TOOLS = ("apply_patch", "functions.apply_patch")
PATCH_LINE = re.compile(r"^\*\*\* (?:Update File|Add File|Delete File|Move to): (.+?)\s*$", re.M)
REDIRECT = re.compile(r"^(?:\d*|&)>>?\|?(.*)$")
# Commands whose last word(s) are written: `mv a b` (both), `rm a b`, `cp a b` (the target).
WRITES_ALL = ("rm", "mv")
WRITES_LAST = ("cp",)
SEPARATORS = {"&&", "||", ";", "|", "&"}


def payload(text: str) -> dict[str, Any]:
    """The hook's JSON input; ValueError naming what is wrong."""
    data = json.loads(text) if text.strip() else None
    if not isinstance(data, dict):
        raise ValueError("the hook input on stdin must be a JSON object")
    return data


def edited_paths(client: str, data: Mapping[str, Any]) -> list[str]:
    """The paths (as the harness names them) the tool call would write; none for a tool
    that does not write files."""
    tool = data.get("tool_name")
    given = data.get("tool_input")
    tool_input: Mapping[str, Any] = given if isinstance(given, dict) else {}
    found: list[str] = []
    if tool in PATCH_TOOLS or (client == "codex" and tool in (None, "apply_patch")):
        for key in ("command", "input", "patch"):
            text = tool_input.get(key)
            if isinstance(text, str):
                found += PATCH_LINE.findall(text)
            elif isinstance(text, list):
                found += PATCH_LINE.findall("\n".join(str(x) for x in text))
    elif tool in FILE_TOOLS or tool == NOTEBOOK_TOOL:
        for key in ("file_path", "notebook_path"):
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                found.append(value)
    elif tool == "Bash" and isinstance(tool_input.get("command"), str):
        found += bash_targets(str(tool_input["command"]))
    return list(dict.fromkeys(found))


def bash_targets(command: str) -> list[str]:
    """Best-effort: the files a shell command writes (redirections, `tee`, `sed -i`, `mv`,
    `rm`, `cp`); an unparsable command names none."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return []
    out: list[str] = []
    simple: list[str] = []
    for word in [*words, ";"]:
        ends = word.endswith(";") and word not in SEPARATORS
        if ends:
            simple.append(word[:-1])
        if ends or word in SEPARATORS:
            out += _command_targets([w for w in simple if w])
            simple = []
        else:
            simple.append(word)
    return [p for p in out if p and not p.startswith("/dev/")]


def _command_targets(words: Sequence[str]) -> list[str]:
    out: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(words):
        hit = REDIRECT.match(words[i])
        if hit:
            target = hit.group(1)
            if target.startswith("&"):
                pass  # 2>&1: a descriptor, not a file
            elif target:
                out.append(target)
            elif i + 1 < len(words):
                out.append(words[i + 1])
                i += 1
        else:
            rest.append(words[i])
        i += 1
    if not rest:
        return out
    name, args = os.path.basename(rest[0]), [w for w in rest[1:] if not w.startswith("-")]
    if name == "tee" or name in WRITES_ALL:
        out += args
    elif name in WRITES_LAST and len(args) >= 2:
        out.append(args[-1])
    elif name == "sed" and any(w == "-i" or w.startswith(("-i", "--in-place")) for w in rest):
        out += _sed_files(rest[1:])
    return out


def _sed_files(args: Sequence[str]) -> list[str]:
    """`sed -i [-e SCRIPT]... [SCRIPT] FILE...`: the files (the first bare word is the script
    unless -e or -f gave one)."""
    files: list[str] = []
    script_given = False
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("-e", "-f", "--expression", "--file"):
            script_given = True
            i += 2
            continue
        if not word.startswith("-"):
            if script_given:
                files.append(word)
            else:
                script_given = True
        i += 1
    return files


def relative(raw: str, cwd: str, root: str) -> str | None:
    """`raw` (absolute, or relative to `cwd`) relative to the project `root`; None when it
    lies outside the root (not the project's to lease)."""
    full = os.path.normpath(os.path.join(cwd, os.path.expanduser(raw)))
    rel = os.path.relpath(full, os.path.normpath(root))
    if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
        return None
    return rel.replace(os.sep, "/")


def holder_reason(check: Mapping[str, Any]) -> str:
    """The deny reason for a `lease_check` answer that is not allowed: `<path> is leased to
    <agent> until <time> (<reason>, task <id>); ask them or wait` (the parentheses only when
    there is a reason or a task), or the check's own message (a lease of the agent that lost
    a race)."""
    held = check.get("held_by") or []
    if check.get("lost") or not held:
        return str(check.get("message") or f"{check.get('path')} is not free")
    lease = held[0]
    detail = ", ".join(
        x
        for x in (
            lease.get("reason") or "",
            f"task {lease['task_id']}" if lease.get("task_id") else "",
        )
        if x
    )
    return (
        f"{check['path']} is leased to {lease['agent']} until {lease['expires_at']}"
        f"{f' ({detail})' if detail else ''}; ask them or wait"
    )


def deny(reason: str) -> str:
    """The PreToolUse deny both Claude Code and Codex read (one JSON line)."""
    out = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
    return json.dumps(out, ensure_ascii=False)
