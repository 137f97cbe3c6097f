"""What a `logstream` process pays before its command runs (issue 25): importing the modules
of a CLI write or read compiles no regular expression and generates no code (each is compiled
or generated on first use, `lazy.pattern`, `plan.new_page`); the console script's lean paths
run without the cyclic garbage collector, and the typer app with it. Counting, never timing:
each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream import LogStore, lazy, validation
from tests.conftest import REPO

# The modules a local append, ack, task move, list and inbox import (their own and the ones
# they reach), with `display`, which the printed answers use.
PATH_MODULES = (
    "mempalace_logstream.cli.fast",
    "mempalace_logstream.store.lean_write",
    "mempalace_logstream.store.lean",
    "mempalace_logstream.store.options",
    "mempalace_logstream.inbox",
    "mempalace_logstream.display",
)

# Imports the standard library first, then records every `re.compile` and every `exec` /
# `compile` of source text that the package's own modules call while they are imported (the
# standard library's, e.g. urllib.parse's pattern or a NamedTuple's `__new__`, are not ours).
COUNT = """
import builtins, json, re, sqlite3, sys, typing
calls = []
real_compile, real_exec, real_builtin_compile = re.compile, builtins.exec, builtins.compile
def ours():
    return sys._getframe(2).f_globals.get("__name__", "").startswith("mempalace_logstream")
def counting_compile(pattern, flags=0):
    if ours():
        calls.append(["re.compile", str(pattern)])
    return real_compile(pattern, flags)
def counting_exec(source, *args, **kwargs):
    if isinstance(source, str) and ours():
        calls.append(["exec", source.split(chr(10))[0]])
    return real_exec(source, *args, **kwargs)
def counting_builtin_compile(source, *args, **kwargs):
    if isinstance(source, str) and ours():
        calls.append(["compile", source[:60]])
    return real_builtin_compile(source, *args, **kwargs)
re.compile, builtins.exec = counting_compile, counting_exec
builtins.compile = counting_builtin_compile
for name in sys.argv[1:]:
    __import__(name)
print(json.dumps(calls))
"""


def _run(code: str, *argv: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_importing_the_cli_paths_compiles_no_pattern_and_generates_no_code() -> None:
    """Each `re.compile` at import was ~0.5-1M instructions of every CLI call (13 on an
    append's path), the page and row fillers' `exec` ~2M: all made on first use now."""
    calls = json.loads(_run(COUNT, *PATH_MODULES))
    # hlc.py imports nothing of the package (tests/test_layers.py) and every write parses a
    # stamp with its pattern: compiled at import.
    assert calls == [["re.compile", r"^(\d{13})-([0-9a-f]{6})-(\S+)$"]]


def test_a_lazy_pattern_answers_as_the_compiled_one() -> None:
    texts = ["", "abc", "ab\n", "x1-y", "\x00", "ü", "12-ab-zz", "-3", "4.5e1"]
    for source, flags in [(r"^[a-z0-9][a-z0-9_.-]{0,63}$", 0), (r"-?[0-9]+(\.[0-9]+)?", 0)]:
        lazy_one, real = lazy.pattern(source, flags), re.compile(source, flags)
        assert "match" not in vars(lazy_one)  # nothing compiled yet
        for text in texts:
            for method in ("match", "search", "fullmatch"):
                got, want = getattr(lazy_one, method)(text), getattr(real, method)(text)
                assert (got and got.span(), got and got.groups()) == (
                    want and want.span(),
                    want and want.groups(),
                ), (source, method, text)
            assert lazy_one.sub("_", text) == real.sub("_", text)
        assert (lazy_one.pattern, lazy_one.flags, lazy_one.groups) == (
            real.pattern,
            real.flags,
            real.groups,
        )
        assert vars(lazy_one)["match"].__self__ is real  # `re` keeps the one compiled


CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@given(st.text(alphabet=st.characters(max_codepoint=0x9F)) | st.text())
def test_has_control_is_the_control_pattern(text: str) -> None:
    """`validation.has_control` (str methods for ASCII text) finds exactly what the pattern
    it replaces on that text finds."""
    assert validation.has_control(text) is (CONTROL.search(text) is not None)


def test_every_ascii_character_is_a_control_exactly_when_the_pattern_says() -> None:
    for n in range(128):
        assert validation.has_control(chr(n)) is (CONTROL.search(chr(n)) is not None), n
        assert validation.has_control(f"ab{chr(n)}cd") is (n < 0x20 or n == 0x7F), n


# The console script (`cli.console`), reporting whether the cyclic garbage collector was on
# when the process ended: through `os._exit` (a lean path) or SystemExit (the typer app).
CONSOLE = """
import gc, json, os, sys
from mempalace_logstream import cli
real_exit = os._exit
def report(how):
    sys.stdout.flush()
    with open(os.environ["GC_REPORT"], "w") as out:
        json.dump({"how": how, "gc": gc.isenabled()}, out)
def exit_now(code):
    report("lean")
    real_exit(code)
os._exit = exit_now
try:
    cli.console()
except SystemExit:
    report("typer")
    raise
"""


def test_the_lean_paths_run_without_the_cyclic_gc_and_typer_with_it(tmp_path: Path) -> None:
    db = str(tmp_path / "log.sqlite3")
    LogStore.open(db).close()
    report = tmp_path / "gc.json"
    env = {"GC_REPORT": str(report), "HOME": str(tmp_path)}
    note = ("append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "al")
    runs = [
        ((*note, "--body", "hi", "--db", db), {"how": "lean", "gc": False}),
        (("list", "--db", db), {"how": "lean", "gc": False}),
        (("list", "--help"), {"how": "typer", "gc": True}),
        (("stats", "--db", db), {"how": "typer", "gc": True}),
    ]
    for argv, want in runs:
        _run(CONSOLE, *argv, env=env)
        assert json.loads(report.read_text()) == want, argv
        report.unlink()


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)) | st.text())
def test_terminal_text_is_the_escaping_pattern_s(text: str) -> None:
    """`display.terminal` answers printable ASCII without a backslash before compiling a
    pattern: what the escaping substitution makes of any text."""
    from mempalace_logstream import display

    whole = display._re(display._TERMINAL_RE).sub(display._terminal_sub, text)
    assert display.terminal(text) == whole
