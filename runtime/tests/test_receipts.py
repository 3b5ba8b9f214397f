"""receipts/: bundles, signatures, verify() on realistic journals, tamper detection, the CLI.

The journals follow docs/design.md#gated-effects entry by entry (T_dispatch, T_commit, recovery, late results) for
the refund case of docs/design.md#refund-case; they are built here with journal.seal, without a database.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock_runtime import journal, receipts
from interlock_runtime.journal import effect_id_for, payload_hash, seal
from interlock_runtime.receipts import bundle, sign, verify

KEY = b"interlock-test-receipt-key"
WRONG_KEY = b"interlock-test-receipt-kez"
T0 = 1_795_000_000.25  # 2026-11-18, the database clock of the first entry
PAYLOAD = {"payment": "pay_881", "amount": 2000, "metadata": {"request": "case-4471"}}
PREMISES = {"payment": "pay_881", "eligible": True, "refunded_by_others": 0}
REPO = Path(__file__).resolve().parents[2]


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def snapshot(**changes: object) -> dict:
    grant = {
        "grant_id": "grant-approve-1",
        "principal": "refund-agent",
        "action": "refund",
        "constraints": {"amount": {"max": 5000}},
        "payload_hash": payload_hash(PAYLOAD),
        "expires_at": "2027-01-01T00:00:00+00:00",
        "revoked": None,
        "granted_by": "alice",
    }
    grant.update(changes)
    return grant


def checks(violations: list | None = None, live: bool = True, **grant: object) -> dict:
    return {
        "lease_live": live,
        "lease": snapshot(**grant),
        "violations": [] if violations is None else violations,
    }


class Journal:
    """Builds one effect's sealed chain in the shapes of docs/design.md#gated-effects."""

    def __init__(self, key: str = "case-4471") -> None:
        self.effect_id = effect_id_for(key)
        self.entries: list[dict] = []
        self.ts = T0

    def add(self, kind: str, **fields: object) -> Journal:
        entry = {"ts": self.ts, "kind": kind, "effect_id": self.effect_id, **fields}
        self.entries.append(seal(entry, journal.last_hash(self.entries)))
        self.ts += 0.75
        return self

    def wait(self, seconds: float) -> Journal:
        self.ts += seconds
        return self

    def proposed(self, payload: dict = PAYLOAD) -> Journal:
        return self.add(
            "PROPOSED",
            agent="refund",
            lease="grant-approve-1",
            premises=PREMISES,
            effect=payload,
            decision="decide:case-4471:1",
        )

    def authorized(self) -> Journal:
        return self.add("AUTHORIZED", lease="grant-approve-1")

    def dispatched(self, epoch: int = 1, **check_args: object) -> Journal:
        return self.add(
            "DISPATCHED",
            effect=PAYLOAD,
            lease="grant-approve-1",
            premises=PREMISES,
            checks=checks(**check_args),
            by={"workflow_id": "case-4471", "epoch": epoch},
        )

    def submit(self, epoch: int = 1, **check_args: object) -> Journal:
        return self.proposed().authorized().dispatched(epoch, **check_args)

    def bundle(self, key: bytes | None = None, **kwargs: object) -> dict:
        return bundle(self.entries, self.effect_id, key=key, **kwargs)


RESULT = {"id": "re_1", "amount": 2000, "status": "succeeded"}


def happy_path() -> Journal:
    return Journal().submit().add("COMMITTED", result=RESULT)


def retry_after_recovery() -> Journal:
    # Worker epoch 1 sent and was SIGKILLed before T_commit; epoch 2 waited out send_deadline +
    # settle_margin, re-checked grant and premises, and resent with the same idempotency key.
    return (
        Journal()
        .submit(epoch=1)
        .wait(8.0)
        .add(
            "COMMITTED",
            via="retry-idempotent",
            rechecked=checks(),
            result={**RESULT, "replayed": True},
        )
    )


def refused_lease() -> Journal:
    return (
        Journal()
        .proposed()
        .add(
            "REFUSED",
            reason="lease not live, or it does not cover this effect",
            checks={"lease_live": False, "lease": snapshot(revoked="2026-11-18T09:00:00+00:00")},
        )
    )


def ambiguous() -> Journal:
    return (
        Journal()
        .submit()
        .wait(8.0)
        .add("AMBIGUOUS", reason="tier 3: no lookup and no deduplication; not resent")
    )


def still_open() -> Journal:
    return Journal().submit()


SCENARIOS = {
    "happy": happy_path,
    "retry": retry_after_recovery,
    "refused": refused_lease,
    "ambiguous": ambiguous,
    "open": still_open,
}

# (valid, happened, happened_once, authorized_when_fired, assumptions_held, refused,
#  rechecked_at_recovery, sends)
EXPECTED = {
    "happy": (True, True, True, True, True, False, None, 1),
    "retry": (True, True, True, True, True, False, True, 2),
    "refused": (True, False, True, True, True, True, None, 0),
    "ambiguous": (True, "unknown", True, True, True, False, None, 1),
    "open": (True, "unknown", True, True, True, False, None, 1),
}

FIELDS = {
    "integrity",
    "signed_by",
    "verified",
    "valid",
    "tamper_evident",
    "signed",
    "happened",
    "happened_once",
    "authorized_when_fired",
    "assumptions_held",
    "refused",
    "evidence",
    "rechecked_at_recovery",
    "problems",
    "sends",
}


def summary(result: dict) -> tuple:
    return tuple(
        result[k]
        for k in (
            "valid",
            "happened",
            "happened_once",
            "authorized_when_fired",
            "assumptions_held",
            "refused",
            "rechecked_at_recovery",
            "sends",
        )
    )


# --- the five realistic bundles ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_verify_field_for_each_scenario(name: str) -> None:
    built = SCENARIOS[name]()
    unsigned = built.bundle()
    signed = built.bundle(KEY)
    ed_key = receipts.generate()
    ed_signed = built.bundle(ed_key)

    for b, key, expect_signed in (
        (unsigned, None, None),
        (signed, KEY, True),
        (signed, None, None),
        (ed_signed, ed_key.public_key(), True),
        (ed_signed, None, None),
    ):
        result = verify(b, key)
        assert set(result) == FIELDS
        assert summary(result) == EXPECTED[name], result
        assert result["problems"] == []
        assert result["tamper_evident"] is True
        assert result["signed"] is expect_signed
        # Only a signature checked under the verifier's own key establishes integrity.
        assert result["integrity"] == (
            receipts.ESTABLISHED if expect_signed else receipts.NOT_ESTABLISHED
        )
        assert json.loads(json.dumps(result)) == result  # --json can print it as is

    ev = verify(signed, KEY)["evidence"]
    assert ev["entries"] == len(built.entries)
    if name == "happy":
        assert ev["state"] == "committed"
        assert ev["committed"]["result"] == RESULT
        (send,) = ev["sends"]
        assert send["grant"]["grant_id"] == "grant-approve-1"
        assert send["grant"]["granted_by"] == "alice"
        assert send["by"] == {"workflow_id": "case-4471", "epoch": 1}
        assert send["authorized"] and send["premises_held"]
    elif name == "retry":
        assert [s["kind"] for s in ev["sends"]] == ["DISPATCHED", "resend"]
        assert ev["sends"][1]["via"] == "retry-idempotent"
        assert ev["committed"]["via"] == "retry-idempotent"
    elif name == "refused":
        assert ev["state"] == "proposed"
        assert ev["sends"] == []
        assert ev["refusals"][0]["reason"].startswith("lease not live")
        assert ev["refusals"][0]["resolves"] is False
    elif name == "ambiguous":
        assert ev["state"] == "ambiguous"
        assert ev["ambiguous"]["reason"].startswith("tier 3")
    elif name == "open":
        assert ev["state"] == "dispatched"
        assert ev["open_dispatch"]["entry"] == 2
        assert ev["open_dispatch"]["by"] == {"workflow_id": "case-4471", "epoch": 1}


def test_bundle_shape_and_signature_definition() -> None:
    built = happy_path()
    b = built.bundle(KEY)
    assert set(b) == set(receipts.BUNDLE_FIELDS)
    assert b["format"] == "interlock-receipt/1"
    assert b["effect_id"] == built.effect_id
    assert b["entries"] == built.entries and b["entries"] is not built.entries
    expected = receipts._hmac(KEY, f"{built.effect_id}:{built.entries[-1]['hash']}")
    assert (
        b["signature"] == expected
    )  # docs/design.md#journal: HMAC-SHA256 over "effect_id:last_hash"
    assert built.bundle()["signature"] is None and built.bundle()["bundle_signature"] is None
    # sign() returns a signed copy and leaves the argument alone
    unsigned = built.bundle()
    assert sign(unsigned, KEY) == b and unsigned["signature"] is None
    # body texts are accepted as entries
    texts = [journal.body_text(e) for e in built.entries]
    assert bundle(texts, built.effect_id, KEY) == b


def test_bundle_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="effect_id"):
        bundle([], "")
    with pytest.raises(TypeError, match=r"entries\[0\]"):
        bundle([42], "eff_x")  # type: ignore[list-item]
    with pytest.raises(TypeError, match="set"):
        bundle([], "eff_x", late_result={"x": {1}})
    with pytest.raises(ValueError, match="empty"):
        bundle([], "eff_x", key=b"")


def test_wrong_key_unsigned_and_stripped_signatures() -> None:
    b = happy_path().bundle(KEY)
    result = verify(b, WRONG_KEY)
    assert result["signed"] is False and result["valid"] is False
    assert result["problems"] == ["signature does not match this key"]
    assert result["tamper_evident"] is True  # the chain itself is fine
    unsigned = happy_path().bundle()
    result = verify(unsigned, KEY)
    assert result["signed"] is False and not result["valid"]
    assert "not signed" in result["problems"][0]
    stripped = dict(b, bundle_signature=None)
    assert not verify(stripped, KEY)["valid"]
    assert "only one of signature" in " ".join(verify(stripped)["problems"])
    assert verify(b, KEY.decode())["signed"] is True  # a str key is its UTF-8 bytes


# --- what the guarantees report ------------------------------------------------------------------


def test_send_under_a_revoked_grant_is_not_authorized() -> None:
    built = Journal().submit(revoked="2026-11-18T10:00:00+00:00").add("COMMITTED", result=RESULT)
    result = verify(built.bundle(KEY), KEY)
    assert result["valid"] is True  # a true record of a bad send
    assert result["authorized_when_fired"] is False
    assert result["assumptions_held"] is True
    why = result["evidence"]["sends"][0]["why_not_authorized"]
    assert why == ["grant 'grant-approve-1' was revoked (2026-11-18T10:00:00+00:00)"]


@pytest.mark.parametrize(
    ("check_args", "words"),
    [
        ({"live": False}, "did not pass"),
        ({"expires_at": "2026-11-18T08:00:00Z"}, "expired"),
        ({"constraints": {"amount": {"max": 1000}}}, "amount 2000 is above the grant's max 1000"),
        ({"constraints": {"currency": {"in": ["usd"]}}}, "the payload has no 'currency'"),
        # a receipt written before migration 0002 carries max_cents; it still verifies
        ({"constraints": None, "max_cents": 1000}, "exceeds the grant's max_cents 1000"),
        ({"payload_hash": payload_hash({**PAYLOAD, "amount": 3000})}, "payload_hash"),
        ({"grant_id": "grant-other"}, "snapshot is of grant 'grant-other'"),
        # an approval given to another workflow (the DISPATCHED entry's by is case-4471)
        (
            {"principal": "workflow:case-9999"},
            "principal_mismatch: grant 'grant-approve-1' was given to workflow:case-9999",
        ),
    ],
)
def test_each_grant_check_failure_is_reported(check_args: dict, words: str) -> None:
    built = Journal().submit(**check_args).add("COMMITTED", result=RESULT)
    result = verify(built.bundle())
    assert result["authorized_when_fired"] is False
    assert words in " ".join(result["evidence"]["sends"][0]["why_not_authorized"])


def test_grant_expiry_is_judged_at_the_entry_ts() -> None:
    # the DISPATCHED entry is written at T0 + 1.5 (database clock)
    built = Journal().submit(expires_at=iso(T0 + 2.0)).add("COMMITTED", result=RESULT)
    assert verify(built.bundle())["authorized_when_fired"] is True
    built = Journal().submit(expires_at=iso(T0 + 1.5)).add("COMMITTED", result=RESULT)
    assert verify(built.bundle())["authorized_when_fired"] is False  # expires_at > now() fails
    no_cap = Journal().submit(constraints=None, payload_hash=None, expires_at=None)
    assert verify(no_cap.bundle())["authorized_when_fired"] is True


def test_a_dispatch_without_authorized_is_not_authorized() -> None:
    built = Journal().proposed().dispatched().add("COMMITTED", result=RESULT)
    result = verify(built.bundle())
    assert result["authorized_when_fired"] is False
    assert "no AUTHORIZED entry" in result["evidence"]["sends"][0]["why_not_authorized"][0]


def test_recorded_violations_mean_assumptions_did_not_hold() -> None:
    built = Journal().submit(violations=["payment pay_881 refunded by others: 2000"])
    result = verify(built.add("COMMITTED", result=RESULT).bundle())
    assert result["assumptions_held"] is False
    assert result["authorized_when_fired"] is True
    assert "refunded by others" in result["evidence"]["sends"][0]["why_premises_not_held"][0]
    missing = Journal().submit()
    del missing.entries[-1]["checks"]["violations"]  # no premise check recorded at all
    missing.entries[-1]["hash"] = journal.entry_hash(missing.entries[-1])
    assert verify(missing.bundle())["assumptions_held"] is False


def test_a_resend_needs_a_passing_recheck() -> None:
    def resend(rechecked: object) -> dict:
        fields = {"via": "recovery-reapply", "result": RESULT}
        if rechecked is not None:
            fields["rechecked"] = rechecked
        return verify(Journal().submit().wait(8).add("COMMITTED", **fields).bundle())

    ok = resend(checks())
    assert (ok["rechecked_at_recovery"], ok["sends"], ok["happened_once"]) == (True, 2, True)
    revoked = resend(checks(revoked="2026-11-18T10:40:05+00:00"))
    assert revoked["rechecked_at_recovery"] is False
    assert revoked["authorized_when_fired"] is False
    stale = resend(checks(violations=["not eligible"]))
    assert stale["rechecked_at_recovery"] is False and stale["assumptions_held"] is False
    unrecorded = resend(None)
    assert unrecorded["rechecked_at_recovery"] is False
    assert unrecorded["authorized_when_fired"] is False
    # the re-check may carry its own database time; expiry is judged there
    expiring = checks(expires_at=iso(T0 + 9.5))  # the COMMITTED is written at T0 + 10.25
    assert resend({**expiring, "ts": T0 + 9.0})["authorized_when_fired"] is True
    assert resend(expiring)["authorized_when_fired"] is False  # judged at the COMMITTED ts


def test_recovery_outcomes_without_a_resend() -> None:
    found = (
        Journal()
        .submit()
        .wait(8)
        .add("COMMITTED", via="recovery-query", rechecked=checks(), found={"id": "re_1"})
    )
    r = verify(found.bundle())
    assert (r["happened"], r["sends"], r["rechecked_at_recovery"]) == (True, 1, True)
    stale = (
        Journal()
        .submit()
        .wait(8)
        .add(
            "REFUSED",
            reason="stale_premise at recovery",
            resolves=True,
            rechecked=checks(violations=["not eligible"]),
        )
    )
    r = verify(stale.bundle())
    assert (r["happened"], r["refused"], r["sends"]) == (False, True, 1)
    assert r["rechecked_at_recovery"] is True  # it re-checked, and did not resend
    assert r["assumptions_held"] is True  # the one send was on held premises


def test_sent_again_while_open_breaks_happened_once() -> None:
    built = Journal().submit(epoch=1).proposed().authorized().dispatched(epoch=2)
    r = verify(built.add("COMMITTED", result=RESULT).bundle())
    assert r["valid"] is True
    assert r["happened_once"] is False and r["sends"] == 2
    assert "still unresolved" in r["evidence"]["findings"][0]
    after_ambiguous = ambiguous().authorized().dispatched(epoch=2)
    assert verify(after_ambiguous.bundle())["happened_once"] is False


def test_a_new_send_after_a_resolving_refusal_is_fine() -> None:
    built = (
        Journal()
        .submit(epoch=1)
        .add("REFUSED", reason="target rejected: card_declined", resolves=True)
        .submit(epoch=3)
        .add("COMMITTED", result=RESULT)
    )
    r = verify(built.bundle())
    assert (r["valid"], r["happened"], r["happened_once"], r["sends"], r["refused"]) == (
        True,
        True,
        True,
        2,
        False,
    )


def test_two_commits_are_a_problem() -> None:
    built = happy_path().add("COMMITTED", result=RESULT)
    r = verify(built.bundle(KEY), KEY)
    assert r["valid"] is False and r["happened_once"] is False
    assert r["tamper_evident"] is True
    assert r["problems"] == ["more than one COMMITTED (entries[3], entries[4])"]


def late(built: Journal, state: str, epoch: int = 1, **extra: object) -> Journal:
    return built.add(
        "LATE_RESULT", result=RESULT, from_epoch=epoch, state_at_arrival=state, **extra
    )


def test_late_results() -> None:
    # tier 1: the resend replayed the stored refund; the first sender's late answer is the same
    tier1 = late(retry_after_recovery(), "committed")
    r = verify(tier1.bundle(KEY, late_result=RESULT), KEY)
    assert (r["valid"], r["happened"], r["happened_once"], r["evidence"]["landings"]) == (
        True,
        True,
        True,
        1,
    )
    # tier 2: reapplied because the query found nothing, then the first send answers: two refunds
    reapplied = (
        Journal()
        .submit()
        .wait(8)
        .add("COMMITTED", via="recovery-reapply", rechecked=checks(), result=RESULT)
    )
    r = verify(late(reapplied, "committed").bundle(late_result=RESULT))
    assert (r["valid"], r["happened_once"], r["evidence"]["landings"]) == (True, False, 2)
    # resolved as not landed, then the answer came (assumption A2 broken): it did happen
    refused = (
        Journal()
        .submit()
        .wait(8)
        .add("REFUSED", reason="stale_premise at recovery", resolves=True, rechecked=checks())
    )
    r = verify(late(refused, "proposed", assumption_violated="A2").bundle(late_result=RESULT))
    assert (r["valid"], r["happened"], r["happened_once"], r["refused"]) == (True, True, True, True)
    assert any("A2" in f for f in r["evidence"]["findings"])
    # an AMBIGUOUS effect whose answer arrives late did happen
    r = verify(late(ambiguous(), "ambiguous").bundle(late_result=RESULT))
    assert r["happened"] is True
    # the bundle's late_result must agree with the journal
    r = verify(late(ambiguous(), "ambiguous").bundle(late_result={"id": "re_forged"}))
    assert r["problems"] == ["late_result does not match any LATE_RESULT entry of the journal"]
    r = verify(late(ambiguous(), "ambiguous").bundle())
    assert r["problems"] == ["late_result is null but the journal holds a LATE_RESULT"]
    entry_form = {k: v for k, v in late(ambiguous(), "ambiguous").entries[-1].items()}
    entry_form = {k: v for k, v in entry_form.items() if k not in receipts.ENTRY_FRAME}
    assert verify(late(ambiguous(), "ambiguous").bundle(late_result=entry_form))["valid"]


def test_unknown_kinds_are_ignored() -> None:
    built = happy_path()
    future = {
        "ts": built.ts,
        "kind": "ANNOTATED",
        "effect_id": built.effect_id,
        "note": "audited",
        "prev": built.entries[-1]["hash"],
    }
    future["hash"] = journal.entry_hash(future)
    built.entries.append(future)
    r = verify(built.bundle(KEY), KEY)
    assert summary(r) == EXPECTED["happy"]
    assert r["evidence"]["ignored_kinds"] == ["ANNOTATED"]


def test_conflicting_payload_after_commit_keeps_the_receipt() -> None:
    other = {**PAYLOAD, "amount": 3000}
    built = (
        happy_path()
        .proposed(other)
        .add(
            "REFUSED",
            reason="payload differs from recorded decision",
            recorded=payload_hash(PAYLOAD),
            offered=payload_hash(other),
        )
    )
    r = verify(built.bundle())
    assert summary(r) == EXPECTED["happy"]
    assert r["evidence"]["state"] == "committed"


def test_cancelled_and_stale_premise_refusals() -> None:
    cancelled = Journal().proposed().add("REFUSED", reason="cancelled")
    r = verify(cancelled.bundle())
    assert (r["happened"], r["refused"], r["sends"]) == (False, True, 0)
    stale = (
        Journal()
        .proposed()
        .authorized()
        .add("REFUSED", reason=["not eligible"], checks=checks(violations=["not eligible"]))
    )
    r = verify(stale.bundle())
    assert (r["happened"], r["refused"], r["assumptions_held"]) == (False, True, True)


def test_reconciled_is_reported_and_covered_by_the_bundle_signature() -> None:
    attestation = {"by": "alice", "happened": True, "note": "found re_1 in the dashboard"}
    b = ambiguous().bundle(KEY, reconciled=attestation)
    r = verify(b, KEY)
    assert r["valid"] and r["happened"] == "unknown"  # an attestation is not the journal
    assert r["evidence"]["reconciled"] == attestation
    forged = copy.deepcopy(b)
    forged["reconciled"]["happened"] = False
    assert verify(forged, KEY)["problems"] == ["signature does not match this key"]
    assert verify(dict(b, reconciled=[1]))["problems"] == [
        "reconciled is neither null nor an object"
    ]


@pytest.mark.parametrize(
    "garbage",
    [None, [], "text", 3, {}, {"entries": "x"}, {"entries": [1, None]}, {"format": "other/9"}],
)
def test_verify_never_raises_on_garbage(garbage: object) -> None:
    r = verify(garbage, KEY)
    assert set(r) == FIELDS
    assert r["valid"] is False and r["problems"]
    assert r["tamper_evident"] is False
    assert r["integrity"] != receipts.ESTABLISHED


def test_unknown_and_missing_bundle_fields_are_problems() -> None:
    b = happy_path().bundle()
    assert "unknown fields extra" in verify(dict(b, extra=1))["problems"][0]
    partial = dict(b)
    del partial["late_result"]
    assert verify(partial)["problems"] == ["the bundle lacks late_result"]


# --- tampering -----------------------------------------------------------------------------------


def detected(data: bytes, key: bytes | None) -> bool:
    """A changed serialization is caught: unreadable, or verify() says invalid."""
    try:
        loaded = receipts.loads(data)
    except ValueError:
        return True
    return not verify(loaded, key)["valid"]


@functools.cache
def serialized(name: str, signed: bool) -> bytes:
    built = SCENARIOS[name]()
    extra: dict = {}
    if name == "retry" and signed:
        built = late(built, "committed")
        extra = {"late_result": RESULT, "reconciled": {"by": "bob", "note": "checked"}}
    return receipts.dumps(built.bundle(KEY if signed else None, **extra)).encode("utf-8")


def test_every_position_of_the_happy_path_bundle() -> None:
    # Exhaustive over positions: each byte of the canonical serialization is replaced by two
    # different values (low bit flipped, ASCII case bit flipped), both for the unsigned bundle
    # (checked without a key) and for the signed one (checked with the key). The Hypothesis test
    # below tries arbitrary replacement bytes.
    tried = caught = 0
    missed: list[tuple[bool, int, int]] = []
    for signed in (False, True):
        data = serialized("happy", signed)
        key = KEY if signed else None
        assert not detected(data, key)
        for pos, old in enumerate(data):
            for new in (old ^ 0x01, old ^ 0x20):
                tried += 1
                if detected(data[:pos] + bytes([new]) + data[pos + 1 :], key):
                    caught += 1
                else:
                    missed.append((signed, pos, new))
    print(f"single-byte tamper cases, happy path: {caught} of {tried} detected")
    assert not missed, (
        f"{len(missed)} of {tried} single-byte changes were not detected: {missed[:5]}"
    )
    assert tried > 7_000, f"only {tried} cases"


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(SCENARIOS)),
    signed=st.booleans(),
    where=st.floats(min_value=0, max_value=1, exclude_max=True),
    new=st.integers(min_value=0, max_value=255),
)
def test_any_single_byte_change_is_detected(
    name: str, signed: bool, where: float, new: int
) -> None:
    data = serialized(name, signed)
    pos = int(where * len(data))
    if data[pos] == new:
        new = (new + 1) % 256
    assert detected(data[:pos] + bytes([new]) + data[pos + 1 :], KEY if signed else None), (
        name,
        signed,
        pos,
        new,
    )


def mutations(entries: list[dict], effect_id: str) -> dict[str, list[list[dict]]]:
    n = len(entries)
    out: dict[str, list[list[dict]]] = {"removed": [], "reordered": [], "duplicated": []}
    out["inserted"] = []
    for i in range(n):
        out["removed"].append(entries[:i] + entries[i + 1 :])
        for j in range(n + 1):
            out["duplicated"].append(entries[:j] + [entries[i]] + entries[j:])
        for j in range(i + 1, n):
            swapped = list(entries)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            out["reordered"].append(swapped)
    for j in range(n + 1):
        # a well-formed entry, sealed onto the entry before the insertion point
        prev = entries[j - 1]["hash"] if j else None
        forged = seal(
            {"ts": T0 + 1, "kind": "COMMITTED", "effect_id": effect_id, "result": {"id": "forged"}},
            prev,
        )
        out["inserted"].append(entries[:j] + [forged] + entries[j:])
    return out


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_removed_reordered_duplicated_inserted_entries(name: str) -> None:
    built = SCENARIOS[name]()
    cases = mutations(built.entries, built.effect_id)
    count = 0
    for what, variants in cases.items():
        for index, entries in enumerate(variants):
            count += 1
            forged = bundle(entries, built.effect_id)
            # With the key, the signature over the last hash catches every change,
            # even one that re-signs nothing but keeps the original signatures.
            resigned = dict(forged)
            original = built.bundle(KEY)
            resigned["signature"] = original["signature"]
            resigned["bundle_signature"] = original["bundle_signature"]
            assert not verify(resigned, KEY)["valid"], (what, index)
            # Without a key the chain catches all but the two changes a chain cannot see:
            # dropping the last entry, and appending a freshly sealed one.
            truncated = what == "removed" and index == len(built.entries) - 1
            appended = what == "inserted" and index == len(built.entries)
            if not (truncated or appended):
                assert not verify(forged)["valid"], (what, index)
    assert count >= 10


def test_reordering_entries_inside_a_valid_bundle_is_not_valid_json_equal() -> None:
    # Reordering keys inside an entry changes no value: not a tamper, still valid.
    b = happy_path().bundle(KEY)
    reordered = copy.deepcopy(b)
    reordered["entries"][0] = dict(reversed(list(reordered["entries"][0].items())))
    assert verify(reordered, KEY)["valid"]


# --- CLI -----------------------------------------------------------------------------------------


@pytest.fixture
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(receipts.KEY_ENV, raising=False)


def write(tmp_path: Path, name: str, data: bytes | str) -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return str(path)


def test_cli_valid_checklist(tmp_path: Path, capsys, no_env_key) -> None:
    path = write(tmp_path, "r.json", receipts.dumps(retry_after_recovery().bundle(KEY), True))
    assert receipts.main([path, "--key", KEY.decode()]) == 0
    out = capsys.readouterr().out
    assert "VALID" in out and "INVALID" not in out
    for label in (
        "happened",
        "happened once",
        "authorized when fired",
        "premises held",
        "tamper evident",
        "signed",
        "rechecked at recovery",
    ):
        assert f"[ok] {label}" in out, out
    assert "verified: signed by hmac-sha256 key" in out
    # Without a key nothing is established: exit 3 and the exact words, never "VALID".
    assert receipts.main([path]) == 3
    out = capsys.readouterr().out
    assert "[--] signed" in out and "VALID" not in out.split()
    assert out.splitlines()[-1] == "unsigned: integrity not established"


def test_cli_json_and_key_sources(tmp_path: Path, capsys, monkeypatch, no_env_key) -> None:
    path = write(tmp_path, "r.json", receipts.dumps(happy_path().bundle(KEY)))
    key_file = write(tmp_path, "key", KEY + b"\n")
    assert receipts.main([path, "--key-file", key_file, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["signed"] is True and result["valid"] is True
    monkeypatch.setenv("MY_KEY", KEY.decode())
    assert receipts.main([path, "--key-env", "MY_KEY", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["signed"] is True
    monkeypatch.setenv(receipts.KEY_ENV, WRONG_KEY.decode())  # the default key source
    assert receipts.main([path, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["signed"] is False
    assert receipts.main([path, "--no-key"]) == 3
    assert "unsigned: integrity not established" in capsys.readouterr().out


def test_cli_tampered_exit_1(tmp_path: Path, capsys, no_env_key) -> None:
    b = happy_path().bundle(KEY)
    b["entries"][3]["result"]["amount"] = 20000
    path = write(tmp_path, "r.json", receipts.dumps(b, True))
    assert receipts.main([path]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "[NO] tamper evident" in out
    assert "problem: entries[3] (COMMITTED): hash does not re-derive" in out
    path = write(tmp_path, "s.json", receipts.dumps(happy_path().bundle(KEY)))
    assert receipts.main([path, "--key", WRONG_KEY.decode()]) == 1
    assert "signature does not match this key" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "cannot read"),
        (b"{not json", "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"a":1,"a":2}', "duplicate key 'a'"),
        (b'{"a":NaN}', "NaN"),
        (b'{"ts":1795000001e0}', "not written canonically (expected 1795000001.0)"),
        (b'{"n":-0}', "not written canonically"),
    ],
)
def test_cli_unreadable_exit_2(tmp_path: Path, capsys, no_env_key, content, words) -> None:
    path = (
        str(tmp_path / "missing.json") if content is None else write(tmp_path, "bad.json", content)
    )
    assert receipts.main([path]) == 2
    err = capsys.readouterr().err
    assert path in err and words in err, err


def test_cli_bad_key_sources_exit_2(tmp_path: Path, capsys, no_env_key) -> None:
    path = write(tmp_path, "r.json", receipts.dumps(happy_path().bundle(KEY)))
    assert receipts.main([path, "--key-file", str(tmp_path / "nokey")]) == 2
    assert "--key-file" in capsys.readouterr().err
    assert receipts.main([path, "--key-env", "ILR_TEST_UNSET_VARIABLE"]) == 2
    assert "not set" in capsys.readouterr().err
    assert receipts.main([path, "--key", ""]) == 2
    assert "empty" in capsys.readouterr().err
    assert receipts.main([]) == 2  # usage error from argparse
    capsys.readouterr()


def test_cli_as_a_process(tmp_path: Path) -> None:
    good = write(tmp_path, "good.json", receipts.dumps(happy_path().bundle(KEY)))
    data = bytearray(Path(good).read_bytes())
    data[data.index(b'"amount":2000') + 10] ^= 0x01  # 2000 -> 3000 in the PROPOSED payload
    bad = write(tmp_path, "bad.json", bytes(data))
    env = {k: v for k, v in os.environ.items() if k != receipts.KEY_ENV}
    env["PYTHONPATH"] = str(REPO / "runtime") + os.pathsep + env.get("PYTHONPATH", "")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "interlock_runtime.receipts", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    ok = run(good, "--key-env", "ILR_TEST_KEY")
    assert ok.returncode == 2 and "ILR_TEST_KEY" in ok.stderr
    env["ILR_TEST_KEY"] = KEY.decode()
    ok = run(good, "--key-env", "ILR_TEST_KEY")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "[ok] signed" in ok.stdout
    tampered = run(bad, "--key-env", "ILR_TEST_KEY")
    assert tampered.returncode == 1 and "INVALID" in tampered.stdout
    missing = run(str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "nope.json" in missing.stderr


def test_an_audit_that_counts_two_applications_denies_once() -> None:
    # Tier 2: recovery looked the refund up, found nothing, and resent; the first send landed
    # after send_deadline + settle_margin after all (assumption A2 broken). The lookup after
    # the resend settled counts two, and the receipt must not claim "once".
    reapplied = (
        Journal().submit(epoch=1).wait(8.0)
        .add("COMMITTED", via="recovery-reapply", rechecked=checks(), result=RESULT)
    )  # fmt: skip
    r = verify(reapplied.bundle(KEY), KEY)
    assert (r["valid"], r["happened"], r["happened_once"]) == (True, True, True)
    audited = reapplied.add("AUDITED", applications=2, assumption_violated="A2",
                            reason="a lookup after the resend settled")  # fmt: skip
    r = verify(audited.bundle(KEY), KEY)
    assert (r["valid"], r["happened"], r["happened_once"]) == (True, True, False)
    assert r["evidence"]["landings"] == 2
    assert any("found 2 applications (assumption A2 broken)" in f
               for f in r["evidence"]["findings"])  # fmt: skip
    assert "AUDITED" not in r["evidence"]["ignored_kinds"]
