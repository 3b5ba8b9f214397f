"""Conformance: every catalog invariant of layer C, checked over every run source.

The tests are generated from models/catalog.yaml: adding a row with layer C adds a test per
run source (and fails until invariants.py has its check). A source that ran no worker or sent
no effect fails instead of passing vacuously.

Each source runs in each mode (conformance/conftest.py MODES): its plain workflows, or their
`async def` twins on the asyncio worker; the checks read the same ground truth either way. The
async durable source (takeover after SIGKILL, a SIGSTOPped zombie fenced, timers, signals,
fork, continue-as-new) and the async effects source (a kill after the send at tiers 1-3, a
hand refund and a revoke during outages, a cancelled run's effect) both run by default.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.conftest import MODES
from conformance.invariants import INVARIANTS, Evidence
from conformance.run_sources import SOURCES, run_source
from interlock_runtime import db
from models import catalog

REPO = Path(__file__).resolve().parents[1]

CATALOG = catalog.load()
C_ROWS = sorted(name for name, inv in CATALOG.invariants.items() if "C" in inv.layers)


def test_every_layer_c_row_has_a_check_and_every_check_a_row() -> None:
    checks = {CATALOG.invariants[name].check for name in C_ROWS}
    assert checks == set(INVARIANTS), {
        "rows without a check": sorted(checks - set(INVARIANTS)),
        "checks without a row": sorted(set(INVARIANTS) - checks),
    }


@pytest.fixture(scope="module", params=[(n, m) for m in MODES for n in sorted(SOURCES)],
                ids=lambda p: f"{p[1]}-{p[0]}")  # fmt: skip
def evidence(request, admin_dsn, template_db, tmp_path_factory):
    name, mode = request.param
    log_dir = tmp_path_factory.mktemp(f"{mode}-{name}")
    with run_source(name, admin_dsn, template_db, log_dir, mode) as record:
        with db.connect(record.dsn) as conn:
            ev = Evidence(conn, ledger=record.ledger(), access_log=record.access_log(),
                          events=record.events(), revokes=record.revokes,
                          targets=record.target_configs())  # fmt: skip
            counts = conn.execute(
                "select (select count(*) from ilr.claims) as claims, "
                "(select count(*) from ilr.steps) as steps, "
                "(select coalesce(sum(sends), 0) from ilr.effects) as sends").fetchone()  # fmt: skip
            # the mode reached the workers (a plain worker refuses an async workflow, and the
            # asyncio worker a plain one, so the runs finishing says the rest)
            assert all(("--async" in w.proc.args) == (mode == "async") for w in record.workers)
            yield name, ev, counts


def test_the_source_was_not_vacuous(evidence) -> None:
    name, ev, counts = evidence
    assert counts["claims"] > 0 and counts["steps"] > 0, counts
    assert any(e.get("event") == "step_started" for e in ev.events)
    if name == "effects":
        assert counts["sends"] > 0 and ev.ledger and ev.access_log


@pytest.mark.parametrize("invariant", C_ROWS)
def test_invariant_holds(evidence, invariant) -> None:
    name, ev, _ = evidence
    check = INVARIANTS[CATALOG.invariants[invariant].check]
    assert check(ev) == [], f"{invariant} violated in source {name}"
