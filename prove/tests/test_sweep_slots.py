"""The sweep's slot scheduler (runner.run_weighted) and per-variant sizes."""

from __future__ import annotations

import threading
import time

import pytest

from prove import runner
from prove.scenario import load_all


def _record(slots: int, items: list[tuple[str, int, float]]) -> tuple[list[str], int, list]:
    """Run items (name, weight, seconds) and return the finish order, the largest sum of
    running weights seen, and the yielded pairs."""
    lock = threading.Lock()
    state = {"used": 0, "peak": 0}

    def work(item: tuple[str, int, float]) -> str:
        name, w, secs = item
        with lock:
            state["used"] += min(w, slots)
            state["peak"] = max(state["peak"], state["used"])
        time.sleep(secs)
        with lock:
            state["used"] -= min(w, slots)
        return name.upper()

    pairs = list(runner.run_weighted(items, work, slots=slots, weight=lambda it: it[1]))
    return [p[0][0] for p in pairs], state["peak"], pairs


def test_running_weights_never_exceed_the_slots() -> None:
    items = [("mix1", 3, 0.2), ("mix2", 3, 0.2), ("mix3", 3, 0.2), ("a", 1, 0.1), ("b", 1, 0.1),
             ("c", 1, 0.1), ("d", 1, 0.1)]  # fmt: skip
    order, peak, pairs = _record(6, items)
    assert peak <= 6
    assert sorted(order) == sorted(i[0] for i in items)  # every item, exactly once
    assert all(out == item[0].upper() for item, out in pairs)


def test_items_that_fit_together_run_together() -> None:
    items = [("heavy1", 3, 0.3), ("heavy2", 2, 0.3), ("light", 1, 0.05)]
    order, peak, _ = _record(6, items)
    assert order[0] == "light"  # all three started at once; the light one ended first
    assert peak == 6


def test_light_items_do_not_starve_a_heavy_one() -> None:
    # slots 2, light items finish one at a time: without a reservation each freed slot would
    # go to the next light item and the heavy one would run last
    items = [("l0", 1, 0.1), ("l1", 1, 0.15), ("heavy", 2, 0.05)] + [
        (f"l{i}", 1, 0.1) for i in range(2, 8)
    ]
    order, peak, _ = _record(2, items)
    assert peak <= 2
    assert order.index("heavy") <= 3  # started as soon as l0 and l1 were done


def test_a_weight_above_the_slots_runs_alone() -> None:
    order, peak, _ = _record(2, [("big", 5, 0.05), ("x", 1, 0.05)])
    assert peak == 2 and sorted(order) == ["big", "x"]


def test_an_exception_in_a_run_reaches_the_caller() -> None:
    def work(item: int) -> int:
        if item == 2:
            raise KeyboardInterrupt
        return item

    with pytest.raises(KeyboardInterrupt):
        list(runner.run_weighted([1, 2, 3], work, slots=1, weight=lambda _: 1))


def test_a_variant_with_its_own_seeds_plans_that_many_runs() -> None:
    (s13,) = load_all(["S13"])
    long_n = s13.runs_per_cell(s13.variant("long"), "quick")
    short_n = s13.runs_per_cell(s13.variant("short"), "quick")
    assert long_n != short_n
    runs = runner.plan([s13], None, "quick", ["runtime"], [2])
    by_variant: dict[str, int] = {}
    for _scn, variant, *_ in runs:
        by_variant[variant.name] = by_variant.get(variant.name, 0) + 1
    assert by_variant == {"long": long_n, "short": short_n}
    # --seeds still overrides every cell
    assert len(runner.plan([s13], 2, "quick", ["runtime"], [2])) == 4
