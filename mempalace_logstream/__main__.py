"""`python -m mempalace_logstream`: the `logstream` command."""

from mempalace_logstream.cli import main

main()
