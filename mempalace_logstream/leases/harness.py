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
# `cp`/`mv` write their destination (`-t DIR` too); `mv` also removes its sources.
COPIES = ("cp", "mv")
COPY_VALUE_OPTIONS = {"-S", "--suffix"}  # options of cp and mv that take the next word
SEPARATORS = {"&&", "||", ";", "|", "&"}
# `cd DIR` and `pushd DIR` move the shell later commands run in, unless they run in a subshell
# of their own (a pipeline's stage, a background job).
DIRECTORY_MOVES = ("cd", "pushd")
SUBSHELL_SEPARATORS = {"|", "&"}


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
    `rm`, `cp`), each resolved against the directory a `cd`/`pushd` earlier in the same shell
    moved to (`cd src && echo x > a.py` writes `src/a.py`); an unparsable command names none.
    After a `cd` to a directory the words do not say (`cd -`, `cd "$X"`), relative targets
    cannot be placed and are not named (the git guard still sees them at commit time)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return []
    out: list[str] = []
    simple: list[str] = []
    where: str | None = ""  # the directory moved to, relative to the hook's cwd; None: unknown
    for word in [*words, ";"]:
        ends = word.endswith(";") and word not in SEPARATORS
        if ends:
            simple.append(word[:-1])
        if ends or word in SEPARATORS:
            cmd = [w for w in simple if w]
            out += [_under(where, p) for p in _command_targets(cmd) if p]
            if cmd and cmd[0] in DIRECTORY_MOVES and (ends or word not in SUBSHELL_SEPARATORS):
                where = _moved(where, cmd[1:])
            simple = []
        else:
            simple.append(word)
    return [p for p in dict.fromkeys(out) if p and not p.startswith("/dev/")]


def _moved(where: str | None, args: Sequence[str]) -> str | None:
    """The directory after `cd ARGS` from `where` (None when the words do not say it)."""
    given = [a for a in args if a not in ("-L", "-P", "-e", "--")]
    if not given:
        return "~"  # `cd` alone: the home directory
    target = given[0]
    if target == "-" or any(c in target for c in "$`*?[{"):
        return None
    return _under(where, target)


def _under(where: str | None, path: str) -> str:
    """`path` as seen from the hook's cwd after moving to `where` ("" when a path is not
    relative to the moved-to directory and that directory is unknown)."""
    if path.startswith(("/", "~")) or where == "":
        return path
    if where is None:
        return ""
    return os.path.normpath(os.path.join(where, path))


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
    name = os.path.basename(rest[0])
    if name in COPIES:
        return out + _copy_targets(name, rest[1:])
    args = [w for w in rest[1:] if not w.startswith("-")]
    if name == "tee" or name == "rm":
        out += args
    elif name == "sed" and any(w == "-i" or w.startswith(("-i", "--in-place")) for w in rest):
        out += _sed_files(rest[1:])
    return out


def _copy_targets(name: str, args: Sequence[str]) -> list[str]:
    """`cp`/`mv` [options] SOURCE... DEST, or with `-t DIR`/`--target-directory[=]DIR`: what
    they write. Into a directory each source lands as DIR/<its name>; with one source and a
    DEST that may be a file or a directory, both are named. `mv` also removes its sources."""
    operands: list[str] = []
    into: str | None = None
    i, options = 0, True
    while i < len(args):
        word = args[i]
        if options and word == "--":
            options = False
        elif options and word in ("-t", "--target-directory") and i + 1 < len(args):
            into = args[i + 1]
            i += 1
        elif options and word.startswith("--target-directory="):
            into = word.partition("=")[2]
        elif options and word.startswith("-t") and not word.startswith("--") and len(word) > 2:
            into = word[2:]
        elif options and word in COPY_VALUE_OPTIONS and i + 1 < len(args):
            i += 1  # `-S SUFFIX`: the value is no operand
        elif not (options and word.startswith("-") and word != "-"):
            operands.append(word)
        i += 1
    if into is not None:
        sources = operands
        out = [os.path.join(into, os.path.basename(s.rstrip("/"))) for s in sources]
    elif len(operands) >= 2:
        sources, dest = operands[:-1], operands[-1]
        joined = [os.path.join(dest, os.path.basename(s.rstrip("/"))) for s in sources]
        out = joined if len(sources) > 1 or dest.endswith("/") else [dest, *joined]
    else:
        return []
    return out + (sources if name == "mv" else [])


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
