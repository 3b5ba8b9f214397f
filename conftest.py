"""Every Hypothesis test of the repository runs from one printed seed.

Each collected @given test without a seed of its own gets hypothesis.seed(ILR_HYPOTHESIS_SEED)
(default 0), which also turns off the example database, so a run generates the same examples
wherever it runs: a test passes or fails by its code, never by chance. The seed is printed
in pytest's header; explore other examples with ILR_HYPOTHESIS_SEED=<n>. The Hypothesis state
machine (conformance/test_stateful.py) has its own seed, ILR_STATEFUL_SEED, printed by it.

`make test` runs the suite in two processes (pytest-xdist), then the `exclusive` tests alone:
those crash or restart the project's cluster, which every other test shares.
"""

from __future__ import annotations

import os

import pytest

HYPOTHESIS_SEED = int(os.environ.get("ILR_HYPOTHESIS_SEED") or 0)


def pytest_report_header(config: pytest.Config) -> list[str]:
    matrix = os.environ.get("ILR_MATRIX_SEED") or "1"
    return [f"hypothesis seed: {HYPOTHESIS_SEED} (rerun with ILR_HYPOTHESIS_SEED={HYPOTHESIS_SEED})",
            f"fault matrix sample seed: {matrix} (rerun with ILR_MATRIX_SEED={matrix}; "
            "conformance/test_matrix.py)"]  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_postgres(items)
    _exclusive_runs_alone(items)
    _seed_hypothesis(items)


# The fixtures that make a database: a test that uses one (or is marked exclusive) needs Postgres.
PG_FIXTURES = {
    "admin_dsn",
    "template_db",
    "dsn",
    "conn",
    "workers",
    "template",
    "services",
    "grants_dsn",
    "in_process",
}


def _mark_postgres(items: list[pytest.Item]) -> None:
    """Mark `pg` every test that needs Postgres: it uses a database fixture, is exclusive, or
    its module says so (`pytestmark = pytest.mark.pg`). `make check` runs the rest, with a DSN
    that reaches nothing, so a test that needs Postgres and is not marked fails there."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & PG_FIXTURES or item.get_closest_marker("exclusive"):
            item.add_marker(pytest.mark.pg)


def _exclusive_runs_alone(items: list[pytest.Item]) -> None:
    """An `exclusive` test crashes or restarts the shared cluster; beside other test processes
    (pytest-xdist) it would fail them, so there it is skipped: run it alone (make test does,
    with `-m exclusive`)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    skip = pytest.mark.skip(reason="exclusive: crashes the shared cluster; run it alone, "
                                   "`pytest -m exclusive` (make test does)")  # fmt: skip
    for item in items:
        if item.get_closest_marker("exclusive"):
            item.add_marker(skip)


def _seed_hypothesis(items: list[pytest.Item]) -> None:
    try:
        from hypothesis import seed
    except ImportError:  # no Hypothesis, no Hypothesis tests
        return
    for item in items:
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        if getattr(test, "is_hypothesis_test", False) and (
            getattr(test, "_hypothesis_internal_use_seed", None) is None
        ):
            seed(HYPOTHESIS_SEED)(test)
