"""The operator console in a cell of the fault matrix: `interlock console` in a process of its
own on a real socket (as runtime/tests/test_console.py starts it), and a person at it. The
person is a plain HTTP client, not a browser (the console's own tests drive Chromium): it logs
in, reads the page a person reads, and posts the form on it, with the session cookie and the
page's CSRF field. What it approves is what the page showed, and the page's fingerprint binds
it."""

from __future__ import annotations

import html
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from conformance.conftest import REPO
from interlock_runtime import db
from interlock_runtime.console import auth
from interlock_runtime.testing import wait_for

OPERATOR, PASSWORD = "alice", "matrix console password"


class ConsoleProcess:
    """`interlock console --port 0` on the cell's database; the URL is the line it prints."""

    def __init__(self, dsn: str, log_dir: Path) -> None:
        with db.connect(dsn) as conn:  # the cell's owner DSN may add operators
            if conn.execute("select 1 from ilr.operators where name = %s",
                            (OPERATOR,)).fetchone() is None:  # fmt: skip
                auth.add_operator(conn, OPERATOR, PASSWORD)
        self._err = open(log_dir / "console.stderr", "w")
        path = os.pathsep.join((str(REPO / "runtime"), str(REPO)))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "interlock_runtime.cli", "console", "--dsn", dsn, "--port", "0"],
            stdout=subprocess.PIPE, stderr=self._err, text=True,
            env={**os.environ, "PYTHONPATH": path})  # fmt: skip
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        if not first.startswith("interlock console: http"):
            self.close()
            raise RuntimeError(f"the console did not start: {first!r}; "
                               + (log_dir / "console.stderr").read_text()[-2000:])  # fmt: skip
        url = urlsplit(first.split()[-1])
        self.host, self.port = str(url.hostname), int(url.port or 80)
        wait_for(self._answers, 30, "the console to answer")  # it prints before it listens

    def _answers(self) -> bool:
        try:
            socket.create_connection((self.host, self.port), timeout=2).close()
            return True
        except OSError:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the console exited with {self.proc.returncode}") from None
            return False

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()


class Refused(RuntimeError):
    """The console answered an action with something other than its success."""


class Person:
    """An operator at the console: one session (its cookie), the pages it reads, the forms it
    posts. Every request is a new connection to the console's socket."""

    def __init__(self, console: ConsoleProcess) -> None:
        self.console = console
        self.cookie = ""

    def _request(self, method: str, path: str,
                 form: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:  # fmt: skip
        conn = http.client.HTTPConnection(self.console.host, self.console.port, timeout=30)
        try:
            headers = {"Cookie": self.cookie} if self.cookie else {}
            body = None
            if form is not None:
                body = urlencode(form)
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
        finally:
            conn.close()

    def log_in(self) -> None:
        status, headers, _ = self._request("POST", "/login",
                                           {"name": OPERATOR, "password": PASSWORD})  # fmt: skip
        if status != 303 or "set-cookie" not in headers:
            raise Refused(f"login answered {status}")
        self.cookie = headers["set-cookie"].split(";", 1)[0]

    def page(self, path: str) -> str:
        status, _, text = self._request("GET", path)
        if status != 200:
            raise Refused(f"GET {path} answered {status}: {_said(text)}")
        return text

    def approve(self, wf: str) -> tuple[str, Any]:
        """Approve what the workflow's page proposes, as that page's form does. Returns the
        grant id the console reported (its flash) and the payload the page showed."""
        where = f"/workflows/{quote(wf, safe='')}"
        text = self.page(where)
        shown = _pre(text, "payload")
        if shown is None:
            raise Refused(f"{wf}: the page proposes nothing to approve: {_said(text)}")
        form = {"csrf": _field(text, "csrf"), "workflow_id": wf,
                "fingerprint": _field(text, "fingerprint")}  # fmt: skip
        status, headers, body = self._request("POST", "/approve", form)
        if status != 303:
            raise Refused(f"approve {wf} answered {status}: {_said(body)}")
        flash = re.search(r"grant (\S+?)</", self.page(headers["location"]))
        if flash is None:
            raise Refused(f"approve {wf}: no grant in the page's flash")
        return html.unescape(flash.group(1)), json.loads(shown)

    def revoke(self, grant: str) -> list[str]:
        """Revoke from the grants page's form; returns the effects the console listed as may
        still land."""
        text = self.page("/grants")
        status, _, body = self._request("POST", "/revoke",
                                        {"csrf": _field(text, "csrf"), "grant_id": grant})  # fmt: skip
        if status != 200:
            raise Refused(f"revoke {grant} answered {status}: {_said(body)}")
        listed = re.search(r'<ul id="may-still-land">(.*?)</ul>', body, re.S)
        if listed is None:
            raise Refused(f"revoke {grant}: the page has no may-still-land list")
        return [html.unescape(e) for e in re.findall(r'<li><a href="[^"]*">([^<]*)</a></li>',
                                                     listed.group(1))]  # fmt: skip


def _field(text: str, name: str) -> str:
    m = re.search(rf'name="{name}" value="([^"]*)"', text)
    if m is None:
        raise Refused(f"the page has no {name} field")
    return html.unescape(m.group(1))


def _pre(text: str, css: str) -> str | None:
    m = re.search(rf'<pre class="{css}">(.*?)</pre>', text, re.S)
    return None if m is None else html.unescape(m.group(1))


def _said(text: str) -> str:
    """The message of one of the console's pages, in one line."""
    m = re.search(r"<main[^>]*>(.*?)</main>", text, re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", m.group(1) if m else text).split())[:300]


def revoke_recorded(person: Person, grant: str, into: list[dict[str, Any]]) -> list[str]:
    """A revoke through the console, recorded as conformance.invariants.record_revoke records
    rt.revoke (the evidence of RevokeLinearizable): what it returned, with the time around it."""
    called_at = time.time()
    returned = person.revoke(grant)
    into.append({"grant": grant, "returned": returned, "called_at": called_at,
                 "returned_at": time.time()})  # fmt: skip
    return returned
