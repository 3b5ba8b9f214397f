"""Receipt key rotation (issue 11): receipts signed with K1 stay verifiable with K1 after the
signer moves to K2; new receipts verify with K2; either key on the other's receipt says clearly
that the signature does not match. Through verify() and the `interlock verify` CLI with each
key source (--key-file, --key-env, ILR_RECEIPT_KEY).

What the design cannot express (reported, not faked here): a receipt names no key id, so a
verifier holding several keys cannot tell which one signed it and must try each; verify() and
the CLI take exactly one key. The last test pins that down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interlock_runtime import journal, receipts
from interlock_runtime.journal import effect_id_for, payload_hash, seal

K1 = b"rotation-test-key-one"
K2 = b"rotation-test-key-two"
PAYLOAD = {"payment": "pay_rot", "amount": 1500}
PREMISES = {"payment": "pay_rot", "eligible": True, "refunded_by_others": 0}
T0 = 1_795_000_000.0
REPO = Path(__file__).resolve().parents[2]


def committed_entries(case: str) -> tuple[str, list[dict]]:
    """A sealed PROPOSED, AUTHORIZED, DISPATCHED, COMMITTED chain (docs/design.md#gated-effects shapes)."""
    eid = effect_id_for(case)
    grant = {"grant_id": f"g-{case}", "principal": "refund-agent", "action": "refund",
             "constraints": None, "payload_hash": payload_hash(PAYLOAD), "expires_at": None,
             "revoked": None, "granted_by": "alice"}  # fmt: skip
    bodies = [
        {"kind": "PROPOSED", "agent": "refund", "lease": grant["grant_id"], "premises": PREMISES,
         "effect": PAYLOAD},
        {"kind": "AUTHORIZED", "lease": grant["grant_id"]},
        {"kind": "DISPATCHED", "effect": PAYLOAD, "lease": grant["grant_id"],
         "premises": PREMISES, "by": {"workflow_id": case, "epoch": 1},
         "checks": {"lease_live": True, "lease": grant, "violations": []}},
        {"kind": "COMMITTED", "result": {"id": f"re_{case}", "amount": 1500}},
    ]  # fmt: skip
    entries: list[dict] = []
    for i, body in enumerate(bodies):
        entries.append(seal({"ts": T0 + i, "effect_id": eid, **body}, journal.last_hash(entries)))
    return eid, entries


@pytest.fixture
def rotated() -> dict[str, dict]:
    """Two receipts signed before the rotation (K1) and one after it (K2)."""
    out = {}
    for case, key in (("old-1", K1), ("old-2", K1), ("new-1", K2)):
        eid, entries = committed_entries(case)
        out[case] = receipts.bundle(entries, eid, key=key)
    return out


def test_old_receipts_verify_with_the_old_key_new_with_the_new(rotated) -> None:
    for case, key in (("old-1", K1), ("old-2", K1), ("new-1", K2)):
        v = receipts.verify(rotated[case], key)
        assert v["valid"] and v["signed"] is True, (case, v["problems"])
        assert v["happened"] is True and v["tamper_evident"]
    # The rotation changed nothing in the old bundles: they are byte-for-byte what was issued.
    eid, entries = committed_entries("old-1")
    assert receipts.dumps(rotated["old-1"]) == receipts.dumps(receipts.bundle(entries, eid, K1))


def test_the_wrong_key_says_so(rotated) -> None:
    for case, wrong in (("old-1", K2), ("new-1", K1)):
        v = receipts.verify(rotated[case], wrong)
        assert not v["valid"] and v["signed"] is False
        assert "signature does not match this key" in v["problems"], v["problems"]
        # The journal itself is intact: only the key is wrong, and the receipt says which.
        assert v["tamper_evident"] and v["problems"] == ["signature does not match this key"]
    text = receipts.checklist(receipts.verify(rotated["old-1"], K2), "old-1.json")
    assert "INVALID" in text and "[NO] signed" in text
    assert "problem: signature does not match this key" in text


def test_without_a_key_the_chain_still_verifies_but_nothing_is_said_about_the_signer(
    rotated,
) -> None:
    v = receipts.verify(rotated["old-1"])
    assert v["valid"] and v["signed"] is None  # no claim about who signed


def test_resigning_an_old_receipt_with_the_new_key_is_explicit(rotated) -> None:
    # A deliberate re-issue under K2 (e.g. to retire K1): the chain signature changes, the
    # entries do not, and K1 no longer matches the re-issued copy.
    resigned = receipts.sign(rotated["old-1"], K2)
    assert resigned["entries"] == rotated["old-1"]["entries"]
    assert resigned["signature"] != rotated["old-1"]["signature"]
    assert receipts.verify(resigned, K2)["signed"] is True
    assert receipts.verify(resigned, K1)["signed"] is False


def cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != receipts.KEY_ENV}
    return subprocess.run([sys.executable, "-m", "interlock_runtime.receipts", *args],
                          capture_output=True, text=True, env={**base, **(env or {})},
                          cwd=str(REPO), timeout=60)  # fmt: skip


def test_the_cli_with_each_key_source_across_a_rotation(rotated, tmp_path) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(receipts.dumps(rotated["old-1"]))
    new.write_text(receipts.dumps(rotated["new-1"]))
    k1, k2 = tmp_path / "k1.key", tmp_path / "k2.key"
    k1.write_bytes(K1 + b"\n")  # one trailing newline is dropped
    k2.write_bytes(K2)
    keys = {"ILR_KEY_OLD": K1.decode(), "ILR_KEY_NEW": K2.decode()}

    ok = [cli([str(old), "--key-file", str(k1)]), cli([str(new), "--key-file", str(k2)]),
          cli([str(old), "--key-env", "ILR_KEY_OLD"], keys),
          cli([str(new), "--key-env", "ILR_KEY_NEW"], keys),
          cli([str(old)], {receipts.KEY_ENV: K1.decode()}),
          cli([str(new)], {receipts.KEY_ENV: K2.decode()})]  # fmt: skip
    for r in ok:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "VALID" in r.stdout and "[ok] signed" in r.stdout, r.stdout

    bad = [cli([str(old), "--key-file", str(k2)]), cli([str(new), "--key-file", str(k1)]),
           cli([str(old), "--key-env", "ILR_KEY_NEW"], keys),
           cli([str(new)], {receipts.KEY_ENV: K1.decode()})]  # fmt: skip
    for r in bad:
        assert r.returncode == 1, r.stdout + r.stderr
        assert "INVALID" in r.stdout and "signature does not match this key" in r.stdout

    # --json carries the same verdict for machines.
    j = json.loads(cli([str(old), "--key-file", str(k2), "--json"]).stdout)
    assert j["signed"] is False and "signature does not match this key" in j["problems"]
    # A missing key source is an unreadable input (exit 2), not a silent unsigned pass.
    r = cli([str(old), "--key-env", "ILR_KEY_NOT_SET"])
    assert r.returncode == 2 and "not set" in r.stderr


def test_what_rotation_lacks_no_key_id_and_one_key_per_verify(rotated) -> None:
    # A receipt does not say which key signed it: no key-id field exists, and an unknown
    # field would make the bundle invalid. A verifier with a key ring must try each key.
    assert set(rotated["old-1"]) == set(receipts.BUNDLE_FIELDS)
    assert not any("key" in f for f in receipts.BUNDLE_FIELDS)
    tagged = dict(rotated["old-1"], key_id="k1")
    assert "the bundle has unknown fields key_id" in receipts.verify(tagged, K1)["problems"]
    ring = {"k1": K1, "k2": K2}
    matches = {kid for kid, k in ring.items() if receipts.verify(rotated["new-1"], k)["signed"]}
    assert matches == {"k2"}  # found only by trying every key of the ring
