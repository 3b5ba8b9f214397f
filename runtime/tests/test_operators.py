"""Operator identity (issue 19): password hashes, `interlock operator add|list|disable`,
sessions and the audit table, on real Postgres (console/auth.py, cli/operator.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time

import pytest

from interlock_runtime import db
from interlock_runtime.console import auth

PASSWORD = "correct horse battery staple"


def operator_cli(dsn: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "operator", *args,
                           "--dsn", dsn], input=stdin, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def audit(conn, event: str | None = None) -> list[dict]:
    rows = conn.execute("select event, operator, subject, detail from ilr.operator_audit "
                        "order by id").fetchall()  # fmt: skip
    return [r for r in rows if event is None or r["event"] == event]


def test_a_password_is_stored_as_salted_scrypt_and_checked() -> None:
    a, b = auth.hash_password(PASSWORD), auth.hash_password(PASSWORD)
    scheme, n, r, p, salt, key = a.split("$")
    assert (scheme, n, r, p) == ("scrypt", "16384", "8", "1")  # the stated cost
    assert a != b  # a fresh salt each time
    assert PASSWORD not in a
    assert auth.check_password(PASSWORD, a) and auth.check_password(PASSWORD, b)
    assert not auth.check_password(PASSWORD + "!", a)
    assert not auth.check_password("", a)
    for broken in ("", "scrypt$1$2", "md5$16384$8$1$c2FsdA==$a2V5", a[:-4] + "!!!!"):
        assert not auth.check_password(PASSWORD, broken)


def test_operator_add_list_disable_from_the_cli(dsn, conn) -> None:
    added = operator_cli(dsn, "add", "grace", stdin=PASSWORD + "\n")
    assert added.returncode == 0, added.stderr
    row = conn.execute("select password_hash from ilr.operators where name = 'grace'").fetchone()
    assert row["password_hash"].startswith("scrypt$16384$8$1$")
    assert auth.check_password(PASSWORD, row["password_hash"])
    # The password is nowhere in the database's operator tables.
    dump = json.dumps([conn.execute(f"select * from ilr.{t}").fetchall()
                       for t in ("operators", "operator_audit")], default=str)  # fmt: skip
    assert PASSWORD not in dump

    again = operator_cli(dsn, "add", "grace", stdin="another long password\n")
    assert again.returncode == 1 and "already exists" in again.stderr
    short = operator_cli(dsn, "add", "heidi", stdin="short\n")
    assert short.returncode == 2 and "at least 12 characters" in short.stderr
    bad = operator_cli(dsn, "add", "<script>", stdin=PASSWORD + "\n")
    assert bad.returncode == 2 and "operator name" in bad.stderr
    empty = operator_cli(dsn, "add", "ivan", stdin="")
    assert empty.returncode == 2 and "no password" in empty.stderr
    names = [r["name"] for r in conn.execute("select name from ilr.operators").fetchall()]
    assert names == ["grace"]

    session = auth.login(conn, "grace", PASSWORD, ttl=600)
    assert session is not None and auth.session(conn, session["token"])["who"] == "grace"
    listed = operator_cli(dsn, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (shown,) = json.loads(listed.stdout)
    assert shown["name"] == "grace" and shown["sessions"] == 1 and shown["disabled_at"] is None
    assert "password_hash" not in shown

    off = operator_cli(dsn, "disable", "grace")
    assert off.returncode == 0 and "1 session(s) ended" in off.stdout, off.stderr
    # Her session is over, and she cannot log in again.
    assert auth.session(conn, session["token"]) is None
    ended = conn.execute("select ended_reason from ilr.operator_sessions").fetchone()
    assert ended["ended_reason"] == "operator disabled"
    assert auth.login(conn, "grace", PASSWORD, ttl=600) is None
    unknown = operator_cli(dsn, "disable", "nobody")
    assert unknown.returncode == 1 and "no operator named 'nobody'" in unknown.stderr
    assert [(a["event"], a["operator"]) for a in audit(conn)] == [
        ("operator_added", "grace"), ("login", "grace"), ("operator_disabled", "grace"),
        ("login_refused", "grace")]  # fmt: skip
    assert audit(conn, "login_refused")[0]["detail"] == {"reason": "operator disabled"}


def test_logins_are_audited_and_sessions_are_stored_hashed_and_expire(conn) -> None:
    auth.add_operator(conn, "judy", PASSWORD)
    assert auth.login(conn, "judy", "not her password", ttl=600) is None
    assert auth.login(conn, "mallory", PASSWORD, ttl=600) is None  # no such operator
    s = auth.login(conn, "judy", PASSWORD, ttl=1.5)
    assert s is not None
    row = conn.execute("select token_hash, csrf from ilr.operator_sessions").fetchone()
    assert row["token_hash"] == hashlib.sha256(s["token"].encode()).hexdigest()
    assert s["token"] not in json.dumps(conn.execute(
        "select * from ilr.operator_sessions").fetchall(), default=str)  # fmt: skip
    assert auth.session(conn, s["token"]) == {"who": "judy", "csrf": row["csrf"],
                                              "expires_at": s["expires_at"]}  # fmt: skip
    assert auth.session(conn, s["token"] + "x") is None and auth.session(conn, None) is None
    time.sleep(2.0)  # past the session's lifetime, by the database clock
    assert auth.session(conn, s["token"]) is None
    other = auth.login(conn, "judy", PASSWORD, ttl=600)
    auth.logout(conn, other["token"])
    assert auth.session(conn, other["token"]) is None
    assert [(a["event"], a["operator"], (a["detail"] or {}).get("reason")) for a in audit(conn)
            if a["event"] != "operator_added"] == [
        ("login_refused", "judy", "wrong password"),
        ("login_refused", "mallory", "unknown operator"),
        ("login", "judy", None), ("login", "judy", None), ("logout", "judy", None)]  # fmt: skip


def test_the_audit_table_is_append_only(conn) -> None:
    import psycopg

    auth.add_operator(conn, "kim", PASSWORD)
    for statement in ("update ilr.operator_audit set operator = 'someone else'",
                      "delete from ilr.operator_audit"):  # fmt: skip
        with pytest.raises(psycopg.Error, match="append-only"):
            conn.execute(statement)
    assert [a["operator"] for a in audit(conn)] == ["kim"]


def test_the_roles_keep_hashes_from_workers_and_auditors(dsn, conn) -> None:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    logins = {"ilr_t_op_w": "worker", "ilr_t_op_a": "auditor", "ilr_t_op_o": "operator"}
    db.apply_roles(conn, logins)
    auth.add_operator(conn, "liam", PASSWORD)

    def as_user(user: str) -> str:
        return make_conninfo(**{**conninfo_to_dict(dsn), "user": user})

    with psycopg.connect(as_user("ilr_t_op_w"), autocommit=True) as w:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute("select password_hash from ilr.operators")
    with psycopg.connect(as_user("ilr_t_op_a"), autocommit=True) as a:
        assert a.execute("select name from ilr.operators").fetchall() == [("liam",)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a.execute("select password_hash from ilr.operators")
    with db.connect(as_user("ilr_t_op_o")) as o:  # the console's role: log in, but not add
        assert auth.login(o, "liam", PASSWORD, ttl=60) is not None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            auth.add_operator(o, "eve", PASSWORD)
