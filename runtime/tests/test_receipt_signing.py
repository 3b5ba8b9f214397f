"""Ed25519 receipts (interlock-receipt/2): the signed head, every byte of a receipt, truncation,
another key's signature, HMAC receipts alongside, the signing extra missing, and the CLI verbs
under hostile input. The last test exports a real effect's receipt from Postgres with
`interlock receipt --signing-key` and checks the private key never reached the database.

Keys are generated when the tests run; none is stored in the repository.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import random
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

# the realistic journals of test_receipts (runtime/tests is on the path, as for flows)
from test_receipts import KEY as HMAC_KEY
from test_receipts import RESULT, SCENARIOS, happy_path, late

from interlock_runtime import receipts
from interlock_runtime.receipts import KeyRing, bundle, verify

REPO = Path(__file__).resolve().parents[2]
UNSIGNED = "unsigned: integrity not established"


@pytest.fixture(scope="module")
def signer() -> ed25519.Ed25519PrivateKey:
    return receipts.generate()


@pytest.fixture(scope="module")
def other() -> ed25519.Ed25519PrivateKey:
    return receipts.generate()


def rich_bundle(key: object) -> dict:
    """A receipt with every part filled: a recovery resend, a late result, a reconciliation."""
    built = late(SCENARIOS["retry"](), "committed")
    return built.bundle(key, late_result=RESULT, reconciled={"by": "bob", "note": "checked"})


def flip_seed() -> int:
    """A fresh seed each run (printed; ILR_FLIP_SEED=N replays one)."""
    fixed = os.environ.get("ILR_FLIP_SEED")
    return int(fixed) if fixed else int.from_bytes(os.urandom(4), "big")


def established(data: bytes, key: object) -> bool:
    """What `interlock verify` exits 0 on: readable, valid, signed under the verifier's key."""
    try:
        loaded = receipts.loads(data)
    except ValueError:
        return False
    result = verify(loaded, key)
    return result["integrity"] == receipts.ESTABLISHED and receipts.exit_status(result) == 0


# --- the signed head ------------------------------------------------------------------------------


def test_the_signed_head_names_the_key_and_covers_count_last_hash_and_content(signer) -> None:
    b = rich_bundle(signer)
    assert b["format"] == "interlock-receipt/2"
    assert set(b) == set(receipts.BUNDLE_FIELDS_V2)
    head = b["head"]
    assert set(head) == set(receipts.HEAD_FIELDS)
    raw = signer.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    assert head["key_id"] == hashlib.sha256(raw).hexdigest()[:16] == receipts.key_id(signer)
    assert head["alg"] == "ed25519" and head["effect_id"] == b["effect_id"]
    assert head["entries"] == len(b["entries"]) and head["last_hash"] == b["entries"][-1]["hash"]
    assert head["content_hash"] == receipts.content_hash(b)
    # The signature is plain Ed25519 over the documented message: anyone can check it with
    # any Ed25519 implementation and the public key alone.
    message = ("interlock-receipt/2 head\n" + receipts.dumps(head)).encode()
    signer.public_key().verify(bytes.fromhex(b["signature"]), message)
    # No part of the private key is in the receipt.
    text = receipts.dumps(b)
    private_raw = signer.private_bytes(serialization.Encoding.Raw,
                                       serialization.PrivateFormat.Raw,
                                       serialization.NoEncryption())  # fmt: skip
    assert private_raw.hex() not in text and base64.b64encode(private_raw).decode() not in text
    v = verify(b, signer.public_key())
    assert (v["valid"], v["signed"], v["integrity"]) == (True, True, receipts.ESTABLISHED)
    assert v["signed_by"] == {"alg": "ed25519", "key_id": head["key_id"]}


def test_without_a_key_nothing_is_established(signer) -> None:
    for b in (rich_bundle(signer), rich_bundle(HMAC_KEY), rich_bundle(None)):
        v = verify(b)
        assert v["valid"] is True and v["signed"] is None, v["problems"]
        assert v["integrity"] == UNSIGNED
        assert receipts.exit_status(v) == 3
        assert receipts.checklist(v).splitlines()[-1] == UNSIGNED
    # A receipt with no signature is the same with a key in hand.
    for key in (signer.public_key(), HMAC_KEY):
        v = verify(rich_bundle(None), key)
        assert v["integrity"] == UNSIGNED and v["signed"] is False
        assert receipts.exit_status(v) == 3
        assert receipts.checklist(v).splitlines()[-1] == UNSIGNED


# --- every byte -----------------------------------------------------------------------------------


def test_every_byte_flip_is_detected_with_the_public_key_and_nothing_verifies_without(
    signer,
) -> None:
    data = receipts.dumps(rich_bundle(signer)).encode("utf-8")
    public = signer.public_key()
    assert established(data, public)
    assert not established(data, None)  # the untouched receipt: not established without a key
    seed = flip_seed()
    print(f"byte-flip seed {seed} over {len(data)} bytes")
    rng = random.Random(seed)
    missed: list[tuple[int, int]] = []
    unkeyed: list[tuple[int, int]] = []
    tried = 0
    for pos, old in enumerate(data):
        # every position: its low bit, and one more replacement byte drawn from the seed
        for new in {old ^ 0x01, (old + rng.randrange(1, 256)) % 256}:
            tried += 1
            flipped = data[:pos] + bytes([new]) + data[pos + 1 :]
            if established(flipped, public):
                missed.append((pos, new))
            if established(flipped, None):
                unkeyed.append((pos, new))
    print(f"{tried} single-byte changes, {len(missed)} not detected (seed {seed})")
    assert not missed, f"seed {seed}: undetected with the public key at {missed[:5]}"
    assert not unkeyed, f"seed {seed}: reported established without a key at {unkeyed[:5]}"
    assert tried > len(data) * 3 // 2  # the two replacements coincide at about 1 in 255


def test_byte_flips_through_the_cli(signer, tmp_path, capsys) -> None:
    data = receipts.dumps(rich_bundle(signer), pretty=True).encode("utf-8")
    pub = tmp_path / "signer.pub"
    pub.write_bytes(receipts.public_pem(signer))
    seed = flip_seed()
    print(f"CLI byte-flip seed {seed}")
    rng = random.Random(seed)
    path = tmp_path / "r.json"
    path.write_bytes(data)
    assert receipts.main([str(path), "--public-key", str(pub)]) == 0
    capsys.readouterr()
    for pos in rng.sample(range(len(data)), 60):
        path.write_bytes(data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1 :])
        # Whitespace between tokens is free in a pretty file, but 0x21 and 0x0b are not JSON
        # whitespace: every flip here is a change.
        status = receipts.main([str(path), "--public-key", str(pub)])
        unkeyed = receipts.main([str(path), "--no-key"])
        out = capsys.readouterr()
        assert status in (1, 2), (seed, pos, out)
        assert unkeyed != 0, (seed, pos, out)


# --- truncation and other keys --------------------------------------------------------------------


@pytest.mark.parametrize("drop", [1, 2, 3])
def test_dropping_the_last_entries_is_detected(signer, drop: int) -> None:
    b = happy_path().bundle(signer)
    truncated = copy.deepcopy(b)
    del truncated["entries"][-drop:]
    # What remains still chains correctly: the hash chain alone cannot see it ...
    assert verify(bundle(truncated["entries"], b["effect_id"]))["tamper_evident"] is True
    # ... the signed head does.
    v = verify(truncated, signer.public_key())
    assert v["valid"] is False and v["integrity"] == receipts.FAILED
    assert v["tamper_evident"] is True
    assert (
        f"the signed head covers 4 entries but the bundle holds {4 - drop}: entries were "
        "dropped (truncated)"
    ) in v["problems"]
    assert f"the head is signed by key {receipts.key_id(signer)}, but the bundle is not the " \
           "one it describes" in v["problems"]  # fmt: skip
    # Re-signing the truncated receipt needs a private key: the attacker's own is not in the ring.
    mallory = receipts.generate()
    resigned = receipts.sign(truncated, mallory)
    v = verify(resigned, KeyRing([signer]))
    assert v["integrity"] == receipts.FAILED
    assert v["problems"] == [
        f"signed by key id {receipts.key_id(mallory)}, which is not in the key ring "
        f"({receipts.key_id(signer)})"
    ]
    # Rewriting only the head (count and last hash) breaks the signature.
    forged = copy.deepcopy(truncated)
    forged["head"].update(entries=4 - drop, last_hash=forged["entries"][-1]["hash"],
                          content_hash=receipts.content_hash(forged))  # fmt: skip
    v = verify(forged, signer.public_key())
    assert v["problems"] == [f"signature does not match key {receipts.key_id(signer)}"]
    # Without a key nothing is established, truncated or not.
    assert verify(truncated)["integrity"] == UNSIGNED


def test_a_signature_by_another_key_is_rejected(signer, other) -> None:
    mine, theirs = happy_path().bundle(signer), happy_path().bundle(other)
    kid, other_kid = receipts.key_id(signer), receipts.key_id(other)
    v = verify(theirs, signer.public_key())
    assert v["signed"] is False and v["integrity"] == receipts.FAILED
    assert v["problems"] == [f"signed by key id {other_kid}, not by the given public key "
                             f"(key id {kid})"]  # fmt: skip
    # Another key's signature pasted under this key's id: the id matches, the signature not.
    spliced = dict(mine, signature=theirs["signature"])
    v = verify(spliced, KeyRing([signer, other]))
    assert v["problems"] == [f"signature does not match key {kid}"]
    # A head claiming this key's id but signed by the other key.
    claimed = dict(mine, signature=other.sign(receipts.head_message(mine["head"])).hex())
    assert verify(claimed, signer.public_key())["problems"] == [
        f"signature does not match key {kid}"
    ]
    # A private key given to verify stands for its public half.
    assert verify(mine, signer)["integrity"] == receipts.ESTABLISHED


def test_hmac_receipts_still_verify_with_their_key_and_only_with_it(signer) -> None:
    old = rich_bundle(HMAC_KEY)
    assert old["format"] == "interlock-receipt/1"
    v = verify(old, HMAC_KEY)
    assert (v["valid"], v["signed"], v["integrity"]) == (True, True, receipts.ESTABLISHED)
    assert v["signed_by"] == {"alg": "hmac-sha256", "key_id": None}
    assert verify(old)["integrity"] == UNSIGNED  # without its key: not established
    v = verify(old, signer.public_key())
    assert v["integrity"] == receipts.FAILED
    assert v["problems"] == ["this receipt is HMAC-signed (interlock-receipt/1): only its HMAC "
                             "key verifies it, not a public key"]  # fmt: skip
    v = verify(rich_bundle(signer), HMAC_KEY)
    assert v["problems"] == [f"this receipt is signed with Ed25519 (key id "
                             f"{receipts.key_id(signer)}): verify it with a public key, not an "
                             "HMAC key"]  # fmt: skip
    # Signing converts between the formats, and the entries never change.
    moved = receipts.sign(old, signer)
    assert moved["entries"] == old["entries"]
    assert verify(moved, signer.public_key())["integrity"] == receipts.ESTABLISHED
    back = receipts.sign(moved, HMAC_KEY)
    assert back == old


def test_a_public_key_cannot_sign(signer) -> None:
    with pytest.raises(TypeError, match="private key"):
        receipts.sign(happy_path().bundle(), signer.public_key())
    with pytest.raises(TypeError, match="Ed25519 private key or HMAC bytes"):
        receipts.sign(happy_path().bundle(), object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="verifying key"):
        verify(happy_path().bundle(), object())  # type: ignore[arg-type]


# --- the signing extra ----------------------------------------------------------------------------

NO_CRYPTOGRAPHY = textwrap.dedent(
    """
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "cryptography" or name.startswith("cryptography."):
                raise ImportError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, Block())
    """
)


def test_without_the_signing_extra_the_error_names_the_install(signer, tmp_path) -> None:
    receipt = tmp_path / "r.json"
    receipt.write_text(receipts.dumps(rich_bundle(signer)))
    pub = tmp_path / "k.pub"
    pub.write_bytes(receipts.public_pem(signer))
    script = NO_CRYPTOGRAPHY + textwrap.dedent(
        f"""
        import json
        from interlock_runtime import receipts
        out = {{}}
        # Checking the chain needs no cryptography.
        out["no_key"] = receipts.verify(receipts.loads(open({str(receipt)!r}).read()))["integrity"]
        try:
            receipts.generate()
        except receipts.SigningUnavailable as exc:
            out["generate"] = str(exc)
        try:
            receipts.verify(receipts.loads(open({str(receipt)!r}).read()), object())
        except receipts.SigningUnavailable as exc:
            out["verify"] = str(exc)
        out["cli"] = receipts.main([{str(receipt)!r}, "--public-key", {str(pub)!r}])
        print(json.dumps(out))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO / "runtime"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    hint = "pip install 'interlock-runtime[signing]'"
    assert out["no_key"] == UNSIGNED
    assert hint in out["generate"] and hint in out["verify"]
    assert out["cli"] == 2
    assert proc.stderr.count("\n") == 1 and hint in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# --- hostile input to the verbs -------------------------------------------------------------------


def hostile_cases(tmp: Path, signer: ed25519.Ed25519PrivateKey) -> dict[str, list[str]]:
    good = tmp / "good.json"
    good.write_text(receipts.dumps(rich_bundle(signer)))
    pub = tmp / "good.pub"
    pub.write_bytes(receipts.public_pem(signer))

    def file(name: str, data: bytes) -> str:
        (tmp / name).write_bytes(data)
        return str(tmp / name)

    pem = receipts.public_pem(signer)
    rsa_pub = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    rsa_pem = rsa_pub.public_bytes(serialization.Encoding.PEM,
                                   serialization.PublicFormat.SubjectPublicKeyInfo)  # fmt: skip
    text = good.read_bytes()
    (tmp / "empty-ring").mkdir()
    return {
        "missing receipt": [str(tmp / "nope.json"), "--public-key", str(pub)],
        "receipt is a directory": [str(tmp), "--public-key", str(pub)],
        "non-UTF-8 receipt": [file("latin.json", b'{"a": "caf\xe9"}'), "--public-key", str(pub)],
        "truncated JSON": [file("cut.json", text[: len(text) // 2]), "--public-key", str(pub)],
        "NUL bytes in the receipt": [file("nul.json", text[:40] + b"\0" + text[40:]), "--no-key"],
        "deeply nested receipt": [file("deep.json", b"[" * 100_000 + b"]" * 100_000), "--no-key"],
        "missing public key": [str(good), "--public-key", str(tmp / "nope.pub")],
        "public key is a directory": [str(good), "--public-key", str(tmp)],
        "garbage PEM": [str(good), "--public-key", file("garbage.pem", b"hello, not a key\n")],
        "PEM with garbage inside": [
            str(good), "--public-key",
            file("inside.pem", b"-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n"),
        ],
        "PEM without its END line": [str(good), "--public-key", file("cut.pem", pem[:60])],
        "non-UTF-8 key file": [str(good), "--public-key", file("bin.pem", b"\x30\x82\xff\xfe")],
        "NUL bytes in the key file": [str(good), "--public-key", file("nul.pem", pem + b"\0")],
        "a private key as the public key": [
            str(good), "--public-key", file("priv.pem", receipts.private_pem(signer)),
        ],
        "an RSA key": [str(good), "--public-key", file("rsa.pem", rsa_pem)],
        "missing key ring": [str(good), "--key-ring", str(tmp / "no-ring")],
        "empty key ring directory": [str(good), "--key-ring", str(tmp / "empty-ring")],
    }  # fmt: skip


def test_hostile_input_to_verify_is_one_line_and_exit_2(signer, tmp_path, capsys) -> None:
    cases = hostile_cases(tmp_path, signer)
    for name, argv in cases.items():
        status = receipts.main(argv)
        out, err = capsys.readouterr()
        assert status == 2, (name, status, out, err)
        assert err.count("\n") == 1 and err.startswith("interlock verify: "), (name, err)
        assert out == "", (name, out)


def test_hostile_input_as_a_process_has_no_traceback(signer, tmp_path) -> None:
    cases = hostile_cases(tmp_path, signer)
    for name in ("non-UTF-8 receipt", "garbage PEM", "NUL bytes in the receipt",
                 "deeply nested receipt", "PEM without its END line"):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "verify",
                               *cases[name]], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=str(REPO / "runtime")))  # fmt: skip
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, (name, proc.stderr)


def test_keygen_writes_a_0600_private_key_and_refuses_to_overwrite(tmp_path, capsys) -> None:
    old = os.umask(0)  # the most permissive umask: the private key must still be 0600
    try:
        assert receipts.keygen_main(["--out", str(tmp_path / "keys")]) == 0
    finally:
        os.umask(old)
    out = capsys.readouterr().out
    private, public = (
        tmp_path / "keys" / "receipt-signing.key",
        tmp_path / "keys" / "receipt-signing.pub",
    )
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key = receipts.load_private_key(private)
    (loaded,) = receipts.load_public_keys(public)
    assert receipts.key_id(loaded) == receipts.key_id(key)
    assert f"key id:      {receipts.key_id(key)}" in out
    before = private.read_bytes()
    assert receipts.keygen_main(["--out", str(tmp_path / "keys")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refusing to overwrite" in err
    assert private.read_bytes() == before
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert receipts.keygen_main(["--out", str(blocker)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert receipts.keygen_main(["--out", str(tmp_path), "--name", "../x"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    # The ring in a keygen directory reads the public key and skips the private one.
    ring = KeyRing.from_path(tmp_path / "keys")
    assert ring.ids() == [receipts.key_id(key)]


# --- a real effect, exported from Postgres --------------------------------------------------------


def test_a_real_receipt_signed_at_export_and_the_key_never_in_the_database(
    dsn, conn, workers, target_factory, tmp_path
) -> None:
    from test_effects import case, start_and_approve

    from interlock_runtime import Runtime

    keys = tmp_path / "keys"
    assert receipts.keygen_main(["--out", str(keys)]) == 0
    private = receipts.load_private_key(keys / "receipt-signing.key")
    target, _admin = target_factory(1)
    with Runtime(dsn) as rt:
        workers("W1")
        start_and_approve(rt, "wf-signed", case(target, 1))
        out = rt.result("wf-signed", timeout=30)
        eid = out["effect_id"]
        assert out["status"] == "COMMITTED"
        # the key object, passed at export (Runtime.receipt itself takes HMAC bytes only)
        in_process = receipts.sign(rt.receipt(eid), private)
    env = dict(os.environ, PYTHONPATH=str(REPO / "runtime"))
    env.pop(receipts.KEY_ENV, None)

    def interlock(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args],
                              capture_output=True, text=True, timeout=60, env=env)  # fmt: skip

    exported = interlock("receipt", eid, "--dsn", dsn, "--signing-key",
                         str(keys / "receipt-signing.key"))  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    bundle_path = tmp_path / "receipt.json"
    bundle_path.write_text(exported.stdout)
    assert json.loads(exported.stdout) == in_process
    assert json.loads(exported.stdout)["head"]["key_id"] == receipts.key_id(private)

    ok = interlock("verify", str(bundle_path), "--public-key", str(keys / "receipt-signing.pub"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "VALID" in ok.stdout and "[ok] signed" in ok.stdout
    unkeyed = interlock("verify", str(bundle_path))
    assert unkeyed.returncode == 3
    assert unkeyed.stdout.splitlines()[-1] == UNSIGNED
    bad_key = interlock(
        "receipt", eid, "--dsn", dsn, "--signing-key", str(keys / "receipt-signing.pub")
    )
    assert bad_key.returncode == 2 and bad_key.stderr.count("\n") == 1, bad_key.stderr
    assert "Traceback" not in bad_key.stderr

    # Truncating the exported file is caught with the public key.
    cut = json.loads(exported.stdout)
    cut["entries"].pop()
    (tmp_path / "cut.json").write_text(json.dumps(cut))
    r = interlock(
        "verify", str(tmp_path / "cut.json"), "--public-key", str(keys / "receipt-signing.pub")
    )
    assert r.returncode == 1 and "entries were dropped (truncated)" in r.stdout

    # No trace of the private key anywhere in the database (every table of every schema).
    raw = private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption())  # fmt: skip
    pem_body = "".join(receipts.private_pem(private).decode().splitlines()[1:-1])
    needles = [raw.hex(), base64.b64encode(raw).decode(), pem_body]
    tables = conn.execute(
        "select table_schema, table_name from information_schema.tables "
        "where table_schema not in ('pg_catalog', 'information_schema') "
        "and table_type = 'BASE TABLE'"
    ).fetchall()
    assert any(t["table_schema"] == "ilr" and t["table_name"] == "journal" for t in tables)
    for t in tables:
        text = conn.execute(
            f"select coalesce(string_agg(x::text, chr(10)), '') as t "
            f'from "{t["table_schema"]}"."{t["table_name"]}" x'
        ).fetchone()["t"]
        for needle in needles:
            assert needle not in text, (t, "the private key is in the database")
