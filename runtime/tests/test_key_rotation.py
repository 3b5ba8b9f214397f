"""Receipt key rotation.

Ed25519 (issue 19): each receipt's signed head names its key id, so a verifier holds a key ring
of public keys (a PEM file of several, or a directory) and each receipt is checked under the key
it names: receipts signed with K1 before the rotation still verify after the signer moves to
K2, and a receipt signed by a key not in the ring is rejected saying which key id it names.

HMAC (issue 11, receipts made before Ed25519): receipts signed with K1 stay verifiable with K1;
either key on the other's receipt says clearly that the signature does not match. An HMAC
receipt names no key id: a verifier holding several HMAC keys has to try each.
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
from interlock_runtime.receipts import KeyRing

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
    assert v["integrity"] == "unsigned: integrity not established"


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


def test_an_hmac_receipt_names_no_key_id_so_a_ring_of_hmac_keys_is_tried_key_by_key(
    rotated,
) -> None:
    # interlock-receipt/1 has no key-id field, and an unknown field makes the bundle invalid.
    assert set(rotated["old-1"]) == set(receipts.BUNDLE_FIELDS)
    tagged = dict(rotated["old-1"], key_id="k1")
    assert "the bundle has unknown fields key_id" in receipts.verify(tagged, K1)["problems"]
    ring = {"k1": K1, "k2": K2}
    matches = {kid for kid, k in ring.items() if receipts.verify(rotated["new-1"], k)["signed"]}
    assert matches == {"k2"}  # found only by trying every key


# --- Ed25519: a ring of public keys, matched by key id ---------------------------------------------


@pytest.fixture(scope="module")
def ed_keys() -> dict[str, object]:
    return {"E1": receipts.generate(), "E2": receipts.generate(), "E3": receipts.generate()}


@pytest.fixture
def ed_rotated(ed_keys) -> dict[str, dict]:
    """Two receipts signed with E1 before the rotation, one with E2 after; one by E3, a key
    nobody put in the ring."""
    out = {}
    for case, name in (("old-1", "E1"), ("old-2", "E1"), ("new-1", "E2"), ("rogue", "E3")):
        eid, entries = committed_entries(case)
        out[case] = receipts.bundle(entries, eid, key=ed_keys[name])
    return out


def test_a_ring_with_both_keys_verifies_old_and_new_by_key_id(ed_rotated, ed_keys) -> None:
    ring = KeyRing([ed_keys["E1"].public_key(), ed_keys["E2"].public_key()])
    assert len(ring) == 2
    for case, name in (("old-1", "E1"), ("old-2", "E1"), ("new-1", "E2")):
        b = ed_rotated[case]
        assert b["head"]["key_id"] == receipts.key_id(ed_keys[name])
        v = receipts.verify(b, ring)
        assert v["valid"] and v["integrity"] == receipts.ESTABLISHED, (case, v["problems"])
        assert v["signed_by"]["key_id"] == receipts.key_id(ed_keys[name])
    # The old receipt is byte for byte what was issued before the rotation.
    eid, entries = committed_entries("old-1")
    reissued = receipts.bundle(entries, eid, key=ed_keys["E1"])  # Ed25519 is deterministic
    assert receipts.dumps(ed_rotated["old-1"]) == receipts.dumps(reissued)


def test_a_receipt_by_a_key_not_in_the_ring_is_rejected_by_its_key_id(ed_rotated, ed_keys) -> None:
    ring = KeyRing([ed_keys["E1"].public_key(), ed_keys["E2"].public_key()])
    ids = sorted([receipts.key_id(ed_keys["E1"]), receipts.key_id(ed_keys["E2"])])
    rogue = receipts.key_id(ed_keys["E3"])
    v = receipts.verify(ed_rotated["rogue"], ring)
    assert not v["valid"] and v["signed"] is False and v["integrity"] == receipts.FAILED
    assert v["problems"] == [
        f"signed by key id {rogue}, which is not in the key ring ({', '.join(ids)})"
    ]
    assert v["tamper_evident"]  # the journal is fine; nobody in the ring vouches for it
    # After the rotation a ring without E1 rejects the old receipts the same way.
    new_only = KeyRing([ed_keys["E2"].public_key()])
    v = receipts.verify(ed_rotated["old-1"], new_only)
    assert v["problems"] == [
        f"signed by key id {receipts.key_id(ed_keys['E1'])}, which is not in the key ring "
        f"({receipts.key_id(ed_keys['E2'])})"
    ]
    # A head that claims a ring key's id but was signed by the rogue key.
    forged = dict(ed_rotated["rogue"])
    forged["head"] = dict(forged["head"], key_id=receipts.key_id(ed_keys["E1"]))
    forged["signature"] = ed_keys["E3"].sign(receipts.head_message(forged["head"])).hex()
    v = receipts.verify(forged, ring)
    assert v["problems"] == [f"signature does not match key {receipts.key_id(ed_keys['E1'])}"]


def test_the_cli_with_a_ring_file_a_ring_directory_and_one_public_key(
    ed_rotated, ed_keys, tmp_path
) -> None:
    files = {}
    for case, b in ed_rotated.items():
        files[case] = tmp_path / f"{case}.json"
        files[case].write_text(receipts.dumps(b, pretty=True))
    ring_dir = tmp_path / "ring"
    ring_dir.mkdir()
    for name in ("E1", "E2"):
        (ring_dir / f"{name}.pub").write_bytes(receipts.public_pem(ed_keys[name]))
    (ring_dir / "notes.txt").write_text("not a key; skipped")
    ring_file = tmp_path / "ring.pem"
    ring_file.write_bytes(receipts.public_pem(ed_keys["E1"]) + receipts.public_pem(ed_keys["E2"]))
    e1_pub = ring_dir / "E1.pub"

    for ring in (ring_dir, ring_file):
        for case in ("old-1", "old-2", "new-1"):
            r = cli([str(files[case]), "--key-ring", str(ring)])
            assert r.returncode == 0, r.stdout + r.stderr
            assert "VALID" in r.stdout and "verified: signed by ed25519 key" in r.stdout
        r = cli([str(files["rogue"]), "--key-ring", str(ring)])
        assert r.returncode == 1 and "INVALID" in r.stdout, r.stdout + r.stderr
        assert f"signed by key id {receipts.key_id(ed_keys['E3'])}, which is not in the key " \
               "ring" in r.stdout  # fmt: skip
    assert cli([str(files["old-1"]), "--public-key", str(e1_pub)]).returncode == 0
    r = cli([str(files["new-1"]), "--public-key", str(e1_pub), "--json"])
    assert r.returncode == 1
    assert json.loads(r.stdout)["problems"] == [
        f"signed by key id {receipts.key_id(ed_keys['E2'])}, not by the given public key "
        f"(key id {receipts.key_id(ed_keys['E1'])})"
    ]
    # No key: nothing is established, whatever the receipt says about its signer.
    r = cli([str(files["old-1"])])
    assert r.returncode == 3 and r.stdout.splitlines()[-1] == "unsigned: integrity not established"
    # An HMAC receipt is still checked by its own key, beside the Ed25519 ones.
    eid, entries = committed_entries("old-hmac")
    old = tmp_path / "old-hmac.json"
    old.write_text(receipts.dumps(receipts.bundle(entries, eid, key=K1)))
    assert cli([str(old)], {receipts.KEY_ENV: K1.decode()}).returncode == 0
    r = cli([str(old), "--key-ring", str(ring_dir)])
    assert r.returncode == 1 and "only its HMAC key verifies it" in r.stdout
    r = cli([str(old), "--no-key"])
    assert r.returncode == 3 and r.stdout.splitlines()[-1] == "unsigned: integrity not established"
