"""journal.py: canonical JSON, payload hash, effect ids, sealing, chains, open dispatch (pure)."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock_runtime import journal
from interlock_runtime.journal import (
    KINDS,
    NotJSON,
    body_text,
    canonical,
    check_chain,
    effect_id_for,
    fingerprint,
    open_dispatch,
    payload_hash,
    seal,
)

EID = effect_id_for("case-4471")
T0 = 1_795_000_000.125


def chain(*kinds_and_fields: tuple[str, dict]) -> list[dict]:
    entries: list[dict] = []
    for offset, (kind, fields) in enumerate(kinds_and_fields):
        entry = {"ts": T0 + offset, "kind": kind, "effect_id": EID, **fields}
        entries.append(seal(entry, journal.last_hash(entries)))
    return entries


def happy() -> list[dict]:
    return chain(
        ("PROPOSED", {"agent": "refund", "lease": "g1", "premises": {}, "effect": {"amount": 1}}),
        ("AUTHORIZED", {"lease": "g1"}),
        ("DISPATCHED", {"effect": {"amount": 1}, "lease": "g1", "checks": {"violations": []}}),
        ("COMMITTED", {"result": {"id": "re_1"}}),
    )


# --- canonical JSON and hashes -------------------------------------------------------------------


def test_canonical_is_sorted_compact_and_keeps_unicode() -> None:
    assert canonical({"b": 1, "a": [1, 2.5, None, True], "é": "ü"}) == (
        '{"a":[1,2.5,null,true],"b":1,"é":"ü"}'
    )
    assert canonical((1, 2)) == "[1,2]"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(), json_values, max_size=6), st.randoms())
def test_payload_hash_is_stable_across_key_order(payload: dict, rnd) -> None:
    items = list(payload.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    assert payload_hash(shuffled) == payload_hash(payload)
    assert payload_hash(json.loads(canonical(payload))) == payload_hash(payload)
    assert payload_hash(payload) == hashlib.sha256(canonical(payload).encode()).hexdigest()


def test_payload_hash_tells_different_payloads_apart() -> None:
    assert payload_hash({"amount": 2000}) != payload_hash({"amount": 3000})
    assert payload_hash({"amount": 2000}) != payload_hash({"amount": "2000"})
    assert payload_hash({"a": [1, 2]}) != payload_hash({"a": [2, 1]})


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"amount": {1, 2}}, ["value['amount']", "set is not JSON"]),
        ({"amount": Decimal("1.5")}, ["Decimal", "float()"]),
        ({"at": __import__("datetime").date(2026, 1, 1)}, ["date", "ISO"]),
        ({"x": b"raw"}, ["bytes is not JSON"]),
        ({"x": [1, float("nan")]}, ["value['x'][1]", "NaN"]),
        ({"x": float("inf")}, ["not a JSON number"]),
        ({1: "one"}, ["key 1", "string keys"]),
        ({"s": "\ud800"}, ["not valid Unicode"]),
        (object(), ["object is not JSON"]),
    ],
)
def test_non_json_raises_a_clear_type_error(value: object, words: list[str]) -> None:
    with pytest.raises(TypeError) as info:
        canonical(value)
    assert isinstance(info.value, NotJSON)
    for word in words:
        assert word in str(info.value)
    with pytest.raises(TypeError):
        payload_hash(value)


def test_circular_reference_is_named() -> None:
    loop: list = []
    loop.append(loop)
    with pytest.raises(NotJSON, match="circular"):
        canonical({"x": loop})


def test_shared_but_acyclic_values_are_fine() -> None:
    shared = [1, 2]
    assert canonical({"a": shared, "b": shared}) == '{"a":[1,2],"b":[1,2]}'


# --- effect ids and fingerprints -----------------------------------------------------------------


def test_effect_id_is_deterministic_and_documented() -> None:
    digest = hashlib.sha256(b'{"request_id":"case-4471"}').hexdigest()
    assert effect_id_for("case-4471") == "eff_" + digest[:32]
    assert effect_id_for("case-4471") == effect_id_for("case-4471")
    assert effect_id_for("case-4471") != effect_id_for("case-4472")
    assert len(effect_id_for("k")) == 4 + 32


def test_effect_id_refuses_bad_keys() -> None:
    with pytest.raises(TypeError, match="str"):
        effect_id_for(4471)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        effect_id_for("")


def test_fingerprint() -> None:
    ph = payload_hash({"amount": 1})
    assert fingerprint(EID, ph) == f"{EID}:{ph}"


# --- seal, body text, chains ---------------------------------------------------------------------


def test_seal_adds_prev_and_a_hash_over_everything_else() -> None:
    entry = {"ts": T0, "kind": "PROPOSED", "effect_id": EID, "effect": {"amount": (1, 2)}}
    sealed = seal(entry, None)
    assert sealed["prev"] is None
    assert sealed["effect"] == {"amount": [1, 2]}  # a plain copy
    without_hash = {k: v for k, v in sealed.items() if k != "hash"}
    assert sealed["hash"] == hashlib.sha256(canonical(without_hash).encode()).hexdigest()
    assert "hash" not in entry and "prev" not in entry  # the argument is untouched
    entry["effect"]["amount"] = 3
    assert sealed["effect"] == {"amount": [1, 2]}
    second = seal({"ts": T0 + 1, "kind": "AUTHORIZED", "effect_id": EID}, sealed["hash"])
    assert second["prev"] == sealed["hash"]
    assert (
        second["hash"] != seal({"ts": T0 + 1, "kind": "AUTHORIZED", "effect_id": EID}, None)["hash"]
    )


def test_body_text_round_trips() -> None:
    for sealed in happy():
        text = body_text(sealed)
        assert text == canonical(sealed)
        assert json.loads(text) == sealed
        assert journal.parse_body(text) == sealed
        assert journal.entry_hash(json.loads(text)) == sealed["hash"]


def test_body_text_refuses_unsealed_or_changed_entries() -> None:
    with pytest.raises(ValueError, match="seal"):
        body_text({"ts": T0, "kind": "PROPOSED", "effect_id": EID})
    sealed = happy()[0]
    sealed["effect"]["amount"] = 999
    with pytest.raises(ValueError, match="changed after it was sealed"):
        body_text(sealed)


@pytest.mark.parametrize(
    ("entry", "prev", "error", "words"),
    [
        ({"kind": "PROPOSED", "effect_id": EID}, None, TypeError, "ts"),
        ({"ts": Decimal("1.5"), "kind": "PROPOSED", "effect_id": EID}, None, TypeError, "float()"),
        ({"ts": True, "kind": "PROPOSED", "effect_id": EID}, None, TypeError, "ts"),
        ({"ts": float("nan"), "kind": "PROPOSED", "effect_id": EID}, None, ValueError, "finite"),
        ({"ts": T0, "kind": "SENT", "effect_id": EID}, None, ValueError, "SENT"),
        ({"ts": T0, "kind": "PROPOSED"}, None, ValueError, "effect_id"),
        ({"ts": T0, "kind": "PROPOSED", "effect_id": EID, "hash": "x"}, None, ValueError, "hash"),
        ({"ts": T0, "kind": "PROPOSED", "effect_id": EID}, "abc", ValueError, "prev_hash"),
        ({"ts": T0, "kind": "PROPOSED", "effect_id": EID, "x": {3}}, None, TypeError, "set"),
        (["not", "a", "dict"], None, TypeError, "dict"),
    ],
)
def test_seal_refuses_bad_entries(entry, prev, error, words) -> None:
    with pytest.raises(error, match=words):
        seal(entry, prev)


def test_kinds_constant() -> None:
    assert KINDS == (
        "PROPOSED",
        "AUTHORIZED",
        "DISPATCHED",
        "COMMITTED",
        "REFUSED",
        "AMBIGUOUS",
        "LATE_RESULT",
        "AUDITED",
    )


def test_intact_chain_has_no_problems_also_after_a_text_round_trip() -> None:
    entries = happy()
    assert check_chain(entries) == []
    assert check_chain(entries, EID) == []
    reloaded = [journal.parse_body(body_text(e)) for e in entries]
    assert check_chain(reloaded) == []
    assert check_chain([]) == []


def test_check_chain_reports_each_kind_of_break() -> None:
    entries = happy()
    # a changed field: its hash no longer re-derives
    changed = [dict(e) for e in entries]
    changed[2] = {**changed[2], "lease": "g2"}
    assert check_chain(changed) == [
        "entries[2] (DISPATCHED): hash does not re-derive from the entry's contents"
    ]
    # a removed entry: the next prev does not link
    removed = entries[:1] + entries[2:]
    assert check_chain(removed) == [
        "entries[1] (DISPATCHED): prev does not link to the hash of entries[0]"
    ]
    # the first entry removed: the new first has a prev
    assert "first entry has prev" in check_chain(entries[1:])[0]
    # reordered
    assert check_chain([entries[0], entries[2], entries[1], entries[3]])
    # duplicated
    assert check_chain(entries[:2] + entries[1:])
    # another effect's entry
    other = seal(
        {"ts": T0 + 9, "kind": "LATE_RESULT", "effect_id": "eff_other", "result": {}},
        entries[-1]["hash"],
    )
    assert check_chain(entries + [other]) == [
        f"entries for more than one effect_id: {EID}, eff_other"
    ]
    assert check_chain(entries, "eff_other") == [f"entries are for {EID}, not for eff_other"]
    # missing fields and non-objects
    problems = check_chain([{"kind": "PROPOSED"}, "text"])
    assert problems[0].startswith("entries[0] (PROPOSED): missing ts, effect_id, prev, hash")
    assert "entries[1]: not a JSON object" in problems


def test_check_chain_reports_two_commits_even_when_linked() -> None:
    entries = happy()
    entries.append(
        seal(
            {"ts": T0 + 10, "kind": "COMMITTED", "effect_id": EID, "result": {}},
            entries[-1]["hash"],
        )
    )
    assert check_chain(entries) == ["more than one COMMITTED (entries[3], entries[4])"]
    assert journal.check_links(entries) == []


def test_unknown_kinds_in_a_stored_chain_are_not_a_problem() -> None:
    entries = happy()
    future = {
        "ts": T0 + 5,
        "kind": "ANNOTATED",
        "effect_id": EID,
        "note": "x",
        "prev": entries[-1]["hash"],
    }
    future["hash"] = journal.entry_hash(future)
    assert check_chain(entries + [future]) == []


# --- open dispatch -------------------------------------------------------------------------------

PROPOSED = ("PROPOSED", {"effect": {"amount": 1}})
AUTHORIZED = ("AUTHORIZED", {"lease": "g1"})
DISPATCHED = ("DISPATCHED", {"effect": {"amount": 1}, "by": {"workflow_id": "w", "epoch": 1}})


def test_open_dispatch_is_the_unresolved_dispatch() -> None:
    entries = chain(PROPOSED, AUTHORIZED, DISPATCHED)
    assert open_dispatch(entries) == entries[2]
    assert open_dispatch(chain(PROPOSED, AUTHORIZED)) is None
    assert open_dispatch([]) is None


@pytest.mark.parametrize(
    "resolution",
    [
        ("COMMITTED", {"result": {"id": "re_1"}}),
        ("COMMITTED", {"via": "retry-idempotent", "rechecked": {}, "result": {}}),
        ("COMMITTED", {"via": "recovery-query", "rechecked": {}, "found": {}}),
        ("AMBIGUOUS", {"reason": "tier 3"}),
        ("REFUSED", {"reason": "target rejected", "resolves": True}),
    ],
)
def test_open_dispatch_resolved_by_each_kind(resolution: tuple[str, dict]) -> None:
    assert open_dispatch(chain(PROPOSED, AUTHORIZED, DISPATCHED, resolution)) is None


@pytest.mark.parametrize(
    "later",
    [
        ("REFUSED", {"reason": "payload differs from recorded decision"}),
        ("REFUSED", {"reason": "x", "resolves": False}),
        ("REFUSED", {"reason": "x", "resolves": "true"}),
        ("LATE_RESULT", {"result": {}, "from_epoch": 1, "state_at_arrival": "dispatched"}),
        ("PROPOSED", {"effect": {"amount": 1}}),
        ("AUTHORIZED", {"lease": "g1"}),
    ],
)
def test_open_dispatch_stays_open_for_non_resolving_entries(later: tuple[str, dict]) -> None:
    entries = chain(PROPOSED, AUTHORIZED, DISPATCHED, later)
    assert open_dispatch(entries) == entries[2]


def test_open_dispatch_ignores_unknown_kinds_and_finds_the_latest_send() -> None:
    entries = chain(
        PROPOSED,
        AUTHORIZED,
        DISPATCHED,
        ("REFUSED", {"reason": "target rejected", "resolves": True}),
        PROPOSED,
        AUTHORIZED,
        DISPATCHED,
    )
    assert open_dispatch(entries) == entries[6]
    future = {"ts": T0 + 99, "kind": "ANNOTATED", "effect_id": EID}
    assert open_dispatch(entries + [future]) == entries[6]
    assert open_dispatch(entries[:4]) is None
