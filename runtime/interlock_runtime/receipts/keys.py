"""Ed25519 keys for receipts: making a key pair, reading PEM files, key ids and key rings.

The private key signs a receipt when it is exported (receipts.sign, `interlock receipt
--signing-key`); it never enters the database. A verifier holds public keys only: one PEM file,
or a key ring (a file of several PEM blocks, or a directory of .pem/.pub files) in which each
receipt's head names its key by key id.

The `cryptography` package is an optional extra (`pip install 'interlock-runtime[signing]'`); it
is imported only here and only when an Ed25519 key is made, read or used. Checking a receipt's
hash chain needs none of it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

INSTALL_HINT = "pip install 'interlock-runtime[signing]'"
ALG = "ed25519"
KEY_ID_HEX = 16  # a key id is the first 16 hex digits (64 bits) of sha256(raw public key)
PRIVATE_NAME = "receipt-signing.key"
PUBLIC_NAME = "receipt-signing.pub"
RING_SUFFIXES = (".pem", ".pub")
MAX_KEY_FILE = 1 << 20  # a PEM key is a few hundred bytes; a larger file is not a key


class SigningUnavailable(RuntimeError):
    """Ed25519 signing or verifying was asked for, but the `cryptography` package is missing."""

    def __init__(self) -> None:
        super().__init__(
            "Ed25519 receipt signatures need the cryptography package: " + INSTALL_HINT
        )


class KeyFileError(ValueError):
    """A key file or key ring that cannot be read, or holds no usable Ed25519 key."""


def _ed25519() -> ModuleType:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # the optional extra is not installed
        raise SigningUnavailable() from None
    return ed25519


def _serialization() -> ModuleType:
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise SigningUnavailable() from None
    return serialization


def _classes() -> tuple[type[Ed25519PrivateKey], type[Ed25519PublicKey]]:
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import (
            Ed25519PrivateKey,
            Ed25519PublicKey,
        )
    except ImportError:
        raise SigningUnavailable() from None
    return Ed25519PrivateKey, Ed25519PublicKey


def public_of(key: Ed25519PublicKey | Ed25519PrivateKey) -> Ed25519PublicKey:
    """The public key itself, or a private key's public half."""
    private_cls, public_cls = _classes()
    if isinstance(key, private_cls):
        return key.public_key()
    if isinstance(key, public_cls):
        return key
    raise TypeError(f"not an Ed25519 key: {type(key).__name__}")


def _load_errors() -> tuple[type[Exception], ...]:
    """What cryptography raises for a PEM it cannot load."""
    try:
        from cryptography.exceptions import UnsupportedAlgorithm
    except ImportError:
        raise SigningUnavailable() from None
    return (ValueError, UnsupportedAlgorithm)


def _crypto_loaded() -> bool:
    """True when cryptography is importable (without raising)."""
    try:
        _ed25519()
    except SigningUnavailable:
        return False
    return True


def is_private_key(key: Any) -> bool:
    if isinstance(key, (bytes, bytearray, str)) or key is None or not _crypto_loaded():
        return False
    return isinstance(key, _ed25519().Ed25519PrivateKey)


def is_public_key(key: Any) -> bool:
    if isinstance(key, (bytes, bytearray, str)) or key is None or not _crypto_loaded():
        return False
    return isinstance(key, _ed25519().Ed25519PublicKey)


def generate() -> Ed25519PrivateKey:
    """A new Ed25519 private key."""
    key: Ed25519PrivateKey = _ed25519().Ed25519PrivateKey.generate()
    return key


def raw_public(public_key: Ed25519PublicKey) -> bytes:
    """The 32 raw bytes of a public key."""
    ser = _serialization()
    raw: bytes = public_key.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    return raw


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """The key id receipts name: the first 16 hex digits of sha256 over the raw public key."""
    return hashlib.sha256(raw_public(public_of(key))).hexdigest()[:KEY_ID_HEX]


def private_pem(private_key: Ed25519PrivateKey) -> bytes:
    """The private key as unencrypted PKCS#8 PEM."""
    ser = _serialization()
    pem: bytes = private_key.private_bytes(
        ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()
    )
    return pem


def public_pem(key: Ed25519PublicKey | Ed25519PrivateKey) -> bytes:
    """The public key (of a private key too) as SubjectPublicKeyInfo PEM."""
    public = public_of(key)
    ser = _serialization()
    pem: bytes = public.public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)
    return pem


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    p = Path(path)
    try:
        if p.is_dir():
            raise KeyFileError(f"{what} {p}: is a directory, not a key file")
        with p.open("rb") as f:
            data = f.read(MAX_KEY_FILE + 1)
    except OSError as exc:
        raise KeyFileError(f"{what} {p}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_KEY_FILE:
        raise KeyFileError(f"{what} {p}: larger than {MAX_KEY_FILE} bytes, not a key file")
    if b"\0" in data:
        raise KeyFileError(f"{what} {p}: holds NUL bytes, not a PEM key")
    try:
        data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise KeyFileError(
            f"{what} {p}: not PEM text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    return data


_BEGIN = b"-----BEGIN "
_END = b"-----END "


def _pem_blocks(data: bytes) -> list[tuple[str, bytes]]:
    """The PEM blocks of a text as (label, block bytes); unterminated blocks are errors."""
    blocks: list[tuple[str, bytes]] = []
    at = 0
    while True:
        start = data.find(_BEGIN, at)
        if start < 0:
            return blocks
        eol = data.find(b"-----", start + len(_BEGIN))
        if eol < 0:
            raise ValueError("a BEGIN line without its closing dashes")
        label = data[start + len(_BEGIN) : eol].decode("ascii", "replace")
        end_marker = _END + label.encode("ascii", "replace") + b"-----"
        end = data.find(end_marker, eol)
        if end < 0:
            raise ValueError(f"the {label} block has no END line")
        blocks.append((label, data[start : end + len(end_marker)] + b"\n"))
        at = end + len(end_marker)


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """The Ed25519 private key in a PEM file (unencrypted PKCS#8, as `interlock keygen` writes).

    Raises KeyFileError (a ValueError) with a one-line reason, SigningUnavailable without the
    signing extra.
    """
    data = _read(path, "signing key")
    private_cls, _ = _classes()
    ser = _serialization()
    try:
        key = ser.load_pem_private_key(data, password=None)
    except TypeError:
        raise KeyFileError(f"signing key {path}: encrypted keys are not supported") from None
    except _load_errors() as exc:
        raise KeyFileError(f"signing key {path}: not a PEM private key ({_short(exc)})") from None
    if not isinstance(key, private_cls):
        raise KeyFileError(f"signing key {path}: a {type(key).__name__}, not an Ed25519 key")
    return key


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:117] + "...") if len(text) > 120 else text or type(exc).__name__


def load_public_keys(path: str | os.PathLike[str]) -> list[Ed25519PublicKey]:
    """Every Ed25519 public key in a PEM file (one or more PUBLIC KEY blocks).

    A file holding a private key is refused: a verifier needs no secret.
    """
    data = _read(path, "public key")
    _, public_cls = _classes()
    ser = _serialization()
    try:
        blocks = _pem_blocks(data)
    except ValueError as exc:
        raise KeyFileError(f"public key {path}: not PEM: {exc}") from None
    if not blocks:
        raise KeyFileError(f"public key {path}: no PEM block (-----BEGIN PUBLIC KEY-----)")
    keys: list[Ed25519PublicKey] = []
    for label, block in blocks:
        if "PRIVATE" in label:
            raise KeyFileError(
                f"public key {path}: holds a private key; a verifier needs the public key only"
            )
        try:
            key = ser.load_pem_public_key(block)
        except _load_errors() as exc:
            raise KeyFileError(f"public key {path}: not a PEM public key ({_short(exc)})") from None
        if not isinstance(key, public_cls):
            raise KeyFileError(f"public key {path}: a {type(key).__name__}, not an Ed25519 key")
        keys.append(key)
    return keys


class KeyRing:
    """Public keys by key id: what a verifier holds to check receipts signed by several keys
    (before and after a rotation). Holds no secret."""

    def __init__(self, keys: Iterable[Ed25519PublicKey | Ed25519PrivateKey] = ()) -> None:
        self._keys: dict[str, Ed25519PublicKey] = {}
        for key in keys:
            self.add(key)

    def add(self, key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
        """Add a public key (a private key contributes its public half only); its key id."""
        try:
            public = public_of(key)
        except TypeError:
            raise TypeError(
                f"a key ring holds Ed25519 public keys, not {type(key).__name__}"
            ) from None
        kid = key_id(public)
        self._keys[kid] = public
        return kid

    def get(self, kid: str) -> Ed25519PublicKey | None:
        return self._keys.get(kid)

    def ids(self) -> list[str]:
        return sorted(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids())

    def __contains__(self, kid: object) -> bool:
        return kid in self._keys

    def __repr__(self) -> str:
        return f"KeyRing({', '.join(self.ids())})"

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> KeyRing:
        """A ring from a PEM file (one or more public keys) or a directory: every regular file
        in it whose name ends in .pem or .pub (others, such as a private .key, are skipped)."""
        p = Path(path)
        ring = cls()
        if not p.exists():
            raise KeyFileError(f"key ring {p}: no such file or directory")
        if p.is_dir():
            try:
                names = sorted(os.listdir(p))
            except OSError as exc:
                raise KeyFileError(f"key ring {p}: cannot list: {exc.strerror or exc}") from None
            files = [p / n for n in names if n.endswith(RING_SUFFIXES) and (p / n).is_file()]
            if not files:
                raise KeyFileError(f"key ring {p}: no .pem or .pub file in the directory")
        else:
            files = [p]
        for f in files:
            for key in load_public_keys(f):
                ring.add(key)
        return ring


def write_key_pair(out_dir: str | os.PathLike[str], name: str = "receipt-signing") -> tuple[Path, Path]:  # fmt: skip
    """Make a key pair in out_dir (created if missing): NAME.key, the private key, mode 0600,
    and NAME.pub, the public key. Refuses to overwrite either. Returns both paths."""
    out = Path(out_dir)
    private_path, public_path = out / f"{name}.key", out / f"{name}.pub"
    for p in (private_path, public_path):
        if p.exists() or p.is_symlink():
            raise KeyFileError(f"{p} exists; refusing to overwrite a key")
    key = generate()
    try:
        out.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, private_pem(key))
        finally:
            os.close(fd)
        fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, public_pem(key))
        finally:
            os.close(fd)
    except OSError as exc:
        raise KeyFileError(f"{out}: cannot write the key pair: {exc.strerror or exc}") from None
    return private_path, public_path


def verify_signature(public_key: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    """True when signature is public_key's Ed25519 signature of message."""
    try:
        from cryptography.exceptions import InvalidSignature
    except ImportError:
        raise SigningUnavailable() from None
    try:
        public_key.verify(signature, message)
    except InvalidSignature:
        return False
    return True
