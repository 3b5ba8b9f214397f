"""Operator identity for the console: accounts, password hashes, sessions, the audit table.

Passwords are hashed with scrypt from the standard library (hashlib.scrypt, N=2**14, r=8,
p=1: 16 MiB of memory and tens of milliseconds per check; a fresh 16-byte salt per password)
and compared in constant time (hmac.compare_digest). The stored text names its parameters,
``scrypt$16384$8$1$<salt>$<hash>`` (base64), so a later cost can verify old hashes.

A session is a random token (secrets.token_urlsafe(32)) in an HttpOnly, SameSite=Strict cookie;
the database keeps only its sha256, an expiry by the database clock, and the CSRF value of its
forms. A session ends when it expires, when its operator logs out, or when the operator is
disabled (the same transaction ends every session of theirs; a lookup also refuses any session
of a disabled operator).

Every login, refused login, logout and every action of the console is a row of
ilr.operator_audit (append-only); the actions write theirs in the same transaction as the
action itself (store.py). All SQL is in sql/queries.sql.

Depends only on the standard library and psycopg: `interlock operator` (cli/operator.py) uses
it without the console extra.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import Any

from .. import db
from ..errors import InvalidInput, WorkflowConflict, WorkflowNotFound

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
"""The scrypt cost of new hashes: N=16384, r=8, p=1 (128*N*r bytes = 16 MiB per check)."""
_DKLEN = 32
_MAXMEM = 64 * 1024 * 1024
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
"""An operator's name (the same rule as the CHECK of ilr.operators.name)."""
MIN_PASSWORD = 12
MAX_PASSWORD = 1024
DEFAULT_SESSION_TTL = 8 * 3600.0
"""Seconds a console session lives (`interlock console --session-ttl`)."""
LOGOUT, DISABLED = "logged out", "operator disabled"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """A salted scrypt hash of `password`, with its parameters, as stored in ilr.operators."""
    salt = secrets.token_bytes(16)
    key = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=_DKLEN,
                         maxmem=_MAXMEM)  # fmt: skip
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(key)}"


def check_password(password: str, stored: str) -> bool:
    """Whether `password` matches the stored hash; constant time in the comparison. A malformed
    stored value matches nothing."""
    try:
        scheme, n, r, p, salt, key = stored.split("$")
        if scheme != "scrypt":
            return False
        want = base64.b64decode(key, validate=True)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt, validate=True),
                             n=int(n), r=int(r), p=int(p), dklen=len(want), maxmem=_MAXMEM)  # fmt: skip
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, want)


# An unknown name costs one scrypt too, so the answer's timing does not say whether it exists.
_DUMMY = hash_password(secrets.token_urlsafe(16))


def token_hash(token: str) -> str:
    """What the database keeps of a session token: its sha256 (the token is 256 random bits,
    so a fast hash is enough; nobody can recover the token from the row)."""
    return hashlib.sha256(token.encode()).hexdigest()


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise InvalidInput(f"operator name {name!r}: 1-64 characters, letters, digits and "
                           "'.', '_', '@', '-', starting with a letter or digit")  # fmt: skip
    return name


def check_new_password(password: str) -> str:
    if len(password) < MIN_PASSWORD:
        raise InvalidInput(f"the password must have at least {MIN_PASSWORD} characters")
    if len(password) > MAX_PASSWORD:
        raise InvalidInput(f"the password must have at most {MAX_PASSWORD} characters")
    if password != password.strip():
        raise InvalidInput("the password must not start or end with whitespace")
    return password


def audit(conn: db.Conn, event: str, operator: str, subject: str | None = None,
          detail: Any = None) -> None:  # fmt: skip
    """One row of ilr.operator_audit, in the caller's transaction (if any)."""
    conn.execute(db.query("audit_insert"), {"event": event, "operator": operator,
                 "subject": subject, "detail": None if detail is None else db.jsonb(detail)})  # fmt: skip


def current_user(conn: db.Conn) -> str:
    user: str = db.one(conn.execute(db.query("console_whoami")))["u"]
    return user


# -- accounts (interlock operator) ---------------------------------------------------------------


def add_operator(conn: db.Conn, name: str, password: str) -> None:
    """Create an operator: InvalidInput if the name or the password breaks the rules,
    WorkflowConflict if the name is taken."""
    check_name(name)
    stored = hash_password(check_new_password(password))
    with conn.transaction():
        row = conn.execute(db.query("operator_insert"), {"name": name, "hash": stored}).fetchone()
        if row is None:
            raise WorkflowConflict(f"an operator named {name!r} already exists; nothing was "
                                   "changed")  # fmt: skip
        audit(conn, "operator_added", name, detail={"by": current_user(conn)})


def list_operators(conn: db.Conn) -> list[db.Row]:
    """Every operator (no hashes): name, created, disabled, live sessions, last login."""
    return conn.execute(db.query("operator_list")).fetchall()


def disable_operator(conn: db.Conn, name: str) -> int:
    """Disable an operator and end their sessions in one transaction; returns how many sessions
    ended. WorkflowNotFound (a LookupError) for an unknown name."""
    with conn.transaction():
        by = current_user(conn)
        if conn.execute(db.query("operator_disable"), {"name": name, "by": by}).fetchone() is None:
            raise WorkflowNotFound(f"no operator named {name!r}")
        ended = conn.execute(db.query("operator_end_sessions"),
                             {"name": name, "reason": DISABLED}).fetchall()  # fmt: skip
        audit(conn, "operator_disabled", name, detail={"by": by, "sessions_ended": len(ended)})
    return len(ended)


# -- sessions (the console) ----------------------------------------------------------------------


def login(conn: db.Conn, name: str, password: str, ttl: float) -> dict[str, Any] | None:
    """Check the password; on success a new session {token, csrf, who, expires_at}, else None.
    Either way one audit row (login, or login_refused with the reason), in the same
    transaction as the session."""
    row = None
    if NAME.match(name):
        row = conn.execute(db.query("operator_get"), {"name": name}).fetchone()
    ok = check_password(password, row["password_hash"] if row else _DUMMY)
    shown = name[:100]
    if row is None or not ok or row["disabled_at"] is not None:
        why = ("unknown operator" if row is None else "wrong password" if not ok
               else "operator disabled")  # fmt: skip
        audit(conn, "login_refused", shown, detail={"reason": why})
        return None
    token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    with conn.transaction():
        made = conn.execute(db.query("session_insert"), {"token_hash": token_hash(token),
                            "operator": name, "csrf": csrf, "ttl": ttl}).fetchone()  # fmt: skip
        if made is None:  # disabled between the check and now
            audit(conn, "login_refused", shown, detail={"reason": "operator disabled"})
            return None
        audit(conn, "login", name, detail={"expires_at": made["expires_at"].isoformat()})
    return {"token": token, "csrf": csrf, "who": name, "expires_at": made["expires_at"]}


def session(conn: db.Conn, token: str | None) -> dict[str, Any] | None:
    """The live session of a cookie's token {who, csrf, expires_at}, or None (unknown, ended,
    expired, or its operator disabled)."""
    if not token:
        return None
    row = conn.execute(db.query("session_get"), {"token_hash": token_hash(token)}).fetchone()
    if row is None:
        return None
    return {"who": row["operator"], "csrf": row["csrf"], "expires_at": row["expires_at"]}


def logout(conn: db.Conn, token: str) -> None:
    with conn.transaction():
        row = conn.execute(db.query("session_end"),
                           {"token_hash": token_hash(token), "reason": LOGOUT}).fetchone()  # fmt: skip
        if row is not None:
            audit(conn, "logout", row["operator"])
