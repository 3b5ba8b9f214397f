"""Every Hypothesis test of the repository runs from one printed seed.

Each collected @given test without a seed of its own gets hypothesis.seed(ILR_HYPOTHESIS_SEED)
(default 0), which also turns off the example database, so a run generates the same examples
wherever it runs: a test passes or fails by its code, never by chance. The seed is printed
in pytest's header; explore other examples with ILR_HYPOTHESIS_SEED=<n>. The Hypothesis state
machine (conformance/test_stateful.py) has its own seed, ILR_STATEFUL_SEED, printed by it.
"""

from __future__ import annotations

import os

import pytest

HYPOTHESIS_SEED = int(os.environ.get("ILR_HYPOTHESIS_SEED") or 0)


def pytest_report_header(config: pytest.Config) -> str:
    return f"hypothesis seed: {HYPOTHESIS_SEED} (rerun with ILR_HYPOTHESIS_SEED={HYPOTHESIS_SEED})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
