"""Benchmarks (never timed unit tests): `python bench/run.py [--quick] [--only NAME ...]`.

Each `bench_<name>.py` module exposes `main(argv: list[str] | None = None) -> int` and prints its
figures side by side with the reference package and raw limits measured in the same run.
"""
