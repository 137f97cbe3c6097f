"""`python -m mempalace_logstream`: the `logstream` command (the lean `inbox` path first)."""

from mempalace_logstream.hook import main

main()
