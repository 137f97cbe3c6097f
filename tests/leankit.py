"""What the lean-path tests share: a console run that reports the modules it loaded, and the
modules a fresh interpreter holds after some imports."""

import json
import os
import subprocess
import sys

from tests.conftest import REPO

# Runs `cli.main()` (the console script) with argv; then writes its exit code and the modules
# it loaded as JSON to $LEAN_REPORT.
CODE = """
import json, os, sys
from mempalace_logstream import cli
code = 0
try:
    cli.main()
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
with open(os.environ["LEAN_REPORT"], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


def modules_after_import(*names: str) -> list[str]:
    """`sys.modules` of a fresh interpreter (this one's environment, the repo on its path)
    once it has imported `names`, sorted."""
    return modules_after(f"import {', '.join(names)}")


def modules_after(code: str) -> list[str]:
    """`sys.modules` of a fresh interpreter (as `modules_after_import`) once it has run
    `code`, sorted."""
    code = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=True,
    ).stdout
    modules: list[str] = json.loads(out)
    return modules
