"""Authority without a domain: declared constraints, and refusals that name their reason."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from interlock_runtime import InvalidInput, Runtime, authority
from interlock_runtime.cli.approve import main as approve_main
from interlock_runtime.journal import payload_hash
from interlock_runtime.testing import wait_for

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
EMAIL = {"to": "ana@example.com", "template": "invoice", "invoice": {"total": 120, "cur": "eur"}}


def grant(**changes: object) -> dict:
    g = {"id": "g1", "principal": "mailer", "action": "send_email", "constraints": None,
         "payload_hash": None, "revoked_at": None, "expires_at": None, "live": True}  # fmt: skip
    g.update(changes)
    return g


def reasons(g: dict | None, action: str = "send_email", payload: object = EMAIL) -> list[str]:
    return authority.refusal_reasons(g, "g1", action, payload, payload_hash(payload))


def test_a_grant_that_covers_the_send_has_no_reasons() -> None:
    assert reasons(grant()) == []
    bounds = {"invoice.total": {"min": 1, "max": 500}, "invoice.cur": {"in": ["eur", "usd"]},
              "template": {"equals": "invoice"}}  # fmt: skip
    assert reasons(grant(constraints=bounds)) == []
    assert reasons(grant(action=None, payload_hash=payload_hash(EMAIL))) == []  # an approval


@pytest.mark.parametrize(("changes", "action", "code"), [
    ({"revoked_at": NOW, "live": False}, "send_email", "revoked: grant 'g1' was revoked at "),
    ({"expires_at": NOW, "live": False}, "send_email", "expired: grant 'g1' expired at "),
    ({}, "refund", "action_mismatch: grant 'g1' allows action 'send_email', this effect is "
                   "'refund'"),
    ({"constraints": {"invoice.total": {"max": 100}}}, "send_email",
     "constraint: invoice.total 120 is above the grant's max 100"),
    ({"constraints": {"invoice.total": {"min": 200}}}, "send_email",
     "constraint: invoice.total 120 is below the grant's min 200"),
    ({"constraints": {"invoice.cur": {"in": ["usd"]}}}, "send_email",
     "constraint: invoice.cur 'eur' is not one of ['usd']"),
    ({"constraints": {"template": {"equals": "reminder"}}}, "send_email",
     "constraint: template 'invoice' is not 'reminder'"),
    ({"constraints": {"cc": {"in": ["x"]}}}, "send_email",
     "constraint: the payload has no 'cc', which the grant bounds"),
    ({"constraints": {"to": {"max": 5}}}, "send_email",
     "constraint: to is 'ana@example.com', not a number to compare with max 5"),
    ({"payload_hash": payload_hash({"to": "eve@example.com"})}, "send_email",
     "payload_not_approved: grant 'g1' approves one exact payload and this is another"),
])  # fmt: skip
def test_each_reason_is_named(changes: dict, action: str, code: str) -> None:
    got = reasons(grant(**changes), action)
    assert len(got) == 1 and got[0].startswith(code), got


def test_an_approval_covers_only_the_workflow_it_was_given_to() -> None:
    mine = grant(principal="workflow:wf-a")
    ph = payload_hash(EMAIL)
    assert authority.refusal_reasons(mine, "g1", "send_email", EMAIL, ph, "wf-a") == []
    other = authority.refusal_reasons(mine, "g1", "send_email", EMAIL, ph, "wf-b")
    assert other == ["principal_mismatch: grant 'g1' was given to workflow:wf-a, and this send is "
                     "by workflow 'wf-b' (approve this workflow's own proposal)"]  # fmt: skip
    # "workflow:wf-a" is not a prefix match for "wf-ab"
    assert authority.refusal_reasons(mine, "g1", "send_email", EMAIL, ph, "wf-ab") == other[:0] + [
        other[0].replace("'wf-b'", "'wf-ab'")
    ]
    # a policy principal names who may act in the application's terms: not interpreted
    policy = grant(principal="billing-agent")
    assert authority.refusal_reasons(policy, "g1", "send_email", EMAIL, ph, "wf-b") == []


def test_a_missing_grant_and_several_reasons_at_once() -> None:
    assert reasons(None) == ["no_grant: there is no grant 'g1'"]
    many = reasons(grant(revoked_at=NOW, live=False, constraints={"invoice.total": {"max": 1}}),
                   action="refund")  # fmt: skip
    assert [r.split(":")[0] for r in many] == ["revoked", "action_mismatch", "constraint"]


@pytest.mark.parametrize("bad", [
    {}, [], "amount<5", {"": {"max": 1}}, {"a..b": {"max": 1}}, {"amount": {}},
    {"amount": {"below": 5}}, {"amount": {"max": float("nan")}}, {"amount": {"max": "5"}},
    {"amount": {"max": True}}, {"amount": {"min": 5, "max": 1}}, {"cur": {"in": []}},
    {"cur": {"in": "usd"}},
])  # fmt: skip
def test_constraints_that_mean_nothing_are_refused_with_what_to_write(bad: object) -> None:
    with pytest.raises(InvalidInput):
        authority.validate_constraints(bad)


def test_grant_and_approve_refuse_nonsense_and_write_nothing(dsn) -> None:
    with Runtime(dsn) as rt:
        for kwargs in ({"constraints": {"amount": {"max": float("inf")}}},
                       {"expires_in": -1}, {"expires_in": float("nan")}, {"expires_in": 0}):  # fmt: skip
            with pytest.raises(InvalidInput):
                rt.grant("bot", "send_email", by="ops", **kwargs)
        with pytest.raises(InvalidInput, match="must name the action"):
            rt.grant("bot", "", by="ops")
        assert rt._execute("select count(*) as n from ilr.grants").fetchone()["n"] == 0


def test_approve_cli_approves_a_proposal_with_no_decision(dsn, workers, capsys) -> None:
    """A workflow that waits in ctx.wait_approval(proposal) and made no ctx.decide: `interlock
    approve WF --by WHO` approves exactly the proposal; --action narrows the grant."""
    import flows

    with Runtime(dsn) as rt:
        workers("W1")
        rt.start(flows.approve_only, "wf-mail", {"to": "ana@example.com"})
        wait_for(lambda: (rt.describe("wf-mail")["waiting"] or {}).get("proposal"), 30,
                 "the proposal")  # fmt: skip
        assert approve_main(["wf-mail", "--by", "alice", "--action", "send_email",
                             "--dsn", dsn]) == 0  # fmt: skip
        out = rt.result("wf-mail", timeout=30)
        (g,) = rt._execute("select action, payload_hash, facts_seen, granted_by from ilr.grants")
    assert out["approval"]["payload"] == {"to": "ana@example.com", "template": "invoice"}
    assert g["action"] == "send_email" and g["granted_by"] == "alice"
    assert g["payload_hash"] == payload_hash(out["approval"]["payload"]) and g["facts_seen"] is None
