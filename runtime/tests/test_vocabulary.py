"""The vocabulary module and the schema's CHECK constraints list the same words.

The constraints are read back from a database the runtime created (pg_constraint), not from
schema.sql, so a migration that forgets a word is caught as well as a typo in the enum.
"""

from __future__ import annotations

import json
import re

import psycopg
import pytest

from interlock_runtime import journal, vocabulary
from interlock_runtime.vocabulary import (
    EffectState,
    EntryKind,
    ResultStatus,
    StepKind,
    Word,
    WorkflowStatus,
)

CHECKED = [
    ("workflows", "status", WorkflowStatus),
    ("steps", "kind", StepKind),
    ("effects", "state", EffectState),
    ("journal", "kind", EntryKind),
]


def allowed_words(conn: psycopg.Connection, table: str, column: str) -> set[str]:
    """The quoted words of the CHECK constraint on ilr.<table>.<column>, as Postgres has it."""
    rows = conn.execute(
        "select pg_get_constraintdef(c.oid) as def from pg_constraint c"
        " join pg_class t on t.oid = c.conrelid join pg_namespace n on n.oid = t.relnamespace"
        " where n.nspname = 'ilr' and t.relname = %s and c.contype = 'c'",
        (table,),
    ).fetchall()
    defs = [r["def"] for r in rows if re.search(rf"\b{column}\b", r["def"]) and "ANY" in r["def"]]
    assert len(defs) == 1, f"expected one list constraint on {table}.{column}, found {defs}"
    return set(re.findall(r"'([^']*)'::text", defs[0]))


@pytest.mark.parametrize(("table", "column", "enum"), CHECKED, ids=[c[0] for c in CHECKED])
def test_schema_checks_list_exactly_the_vocabulary(conn, table, column, enum) -> None:
    assert allowed_words(conn, table, column) == set(enum.values())


def test_a_word_is_its_text_everywhere() -> None:
    w = WorkflowStatus.CONTINUED
    assert w == "continued" and str(w) == "continued" and f"{w}" == "continued"
    assert json.dumps({"s": w}) == '{"s": "continued"}'
    assert "continued" in vocabulary.TERMINAL_STATUSES  # the list one copy used to omit


def test_live_and_terminal_statuses_split_every_status() -> None:
    live, terminal = set(vocabulary.LIVE_STATUSES), set(vocabulary.TERMINAL_STATUSES)
    assert live.isdisjoint(terminal) and live | terminal == set(WorkflowStatus)


def test_derived_lists_come_from_the_vocabulary() -> None:
    assert journal.KINDS == EntryKind.values()
    assert set(vocabulary.LANDED_RESULTS) < set(ResultStatus)
    assert all(issubclass(e, Word) for _, _, e in CHECKED)


def test_a_result_recorded_in_an_older_word_reads_in_todays() -> None:
    """docs/operations.md#words-that-changed: a step row written before 0.2 holds
    REFUSED:lease; the workflow replaying it must see REFUSED:authority, the word its code now
    tests for, and the legacy words are no longer statuses of their own."""
    from interlock_runtime.effects import EffectResult

    old = EffectResult(**{"status": "REFUSED:lease", "effect_id": "eff_1", "reason": "revoked"})
    assert old.status == ResultStatus.REFUSED_AUTHORITY and old.refused
    again = EffectResult("REFUSED:lease_at_recovery", "eff_1")
    assert again.status == "REFUSED:authority_at_recovery"
    assert not set(vocabulary.LEGACY_RESULT_STATUSES) & set(ResultStatus.values())
    assert all("lease" not in s for s in ResultStatus.values())
