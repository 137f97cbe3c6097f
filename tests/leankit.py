"""What the lean-path tests share: a console run that reports the modules it loaded."""

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
