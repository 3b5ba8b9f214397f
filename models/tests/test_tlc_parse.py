"""The TLC output parser of models/tlc.py: violations, traces, statistics, and errors that must
never read as "hold".  Fast: synthetic `-tool` output, no TLC."""

from __future__ import annotations

from models import tlc


def msg(code: int, cls: int, body: str) -> str:
    return f"@!@!@STARTMSG {code}:{cls} @!@!@\n{body}\n@!@!@ENDMSG {code} @!@!@\n"


VERSION = msg(2262, 0, "TLC2 Version 2.15 of Day Month 20?? (rev: d5b5a7f)")
STATS = msg(2199, 0, "1,568 states generated, 754 distinct states found, 0 states left on queue.")
DEPTH = msg(2194, 0, "The depth of the complete state graph search is 10.")

STATE1 = """1: <Initial predicate>
/\\ now = 0
/\\ up = (w1 :> TRUE @@ w2 :> FALSE)
/\\ ws = ( w1 :>
      [ pc |-> "idle",
        meta |-> [payload |-> 20, ok |-> TRUE] ] @@
  w2 :> [pc |-> "load", meta |-> [payload |-> 0, ok |-> FALSE]] )
/\\ journal = <<[kind |-> "PROPOSED", via |-> ""]>>
/\\ keys = {1, 2}
/\\ tHolder = "nobody\""""
STATE2 = """2: <Claim line 169, col 5 to line 177, col 65 of module Runtime>
/\\ now = 1
/\\ up = (w1 :> TRUE @@ w2 :> TRUE)"""


def test_safety_violation_with_trace():
    text = (
        VERSION
        + msg(2110, 1, "Invariant NoRerunAfterComplete is violated.")
        + msg(2121, 1, "The behavior up to this point is:")
        + msg(2217, 4, STATE1)
        + msg(2217, 4, STATE2)
        + STATS
        + DEPTH
        + msg(2186, 0, "Finished in 1978ms at (2026-11-29 23:13:48)")
    )
    out = tlc.parse_output(text, 12)
    assert out["violated"] == "NoRerunAfterComplete"
    assert out["errors"] == []
    assert out["distinct"] == 754 and out["generated"] == 1568 and out["depth"] == 10
    assert out["version"].startswith("TLC2 Version 2.15")
    s1, s2 = out["trace"]
    assert s1["action"] == "Init" and s2["action"] == "Claim"
    v = s1["vars"]
    assert v["now"] == 0 and v["up"] == {"w1": True, "w2": False}
    assert v["ws"]["w1"]["meta"] == {"payload": 20, "ok": True}
    assert v["journal"] == [{"kind": "PROPOSED", "via": ""}]
    assert v["keys"] == {"set": [1, 2]} and v["tHolder"] == "nobody"


def test_success_and_witnesses():
    text = (
        VERSION
        + '<<"REACHED", "Reach_Send">>\n<<"REACHED", "Reach_Commit">>\n'
        + msg(2193, 0, "Model checking completed. No error has been found.")
        + STATS
        + DEPTH
    )
    out = tlc.parse_output(text, 0)
    assert out["success"] and not out["violated"] and not out["errors"]
    assert out["reached"] == ["Reach_Commit", "Reach_Send"]


def test_liveness_violation():
    text = (
        VERSION
        + msg(2116, 1, "Temporal properties were violated.")
        + msg(2264, 1, "The following behavior constitutes a counter-example:")
        + msg(2217, 4, STATE1)
        + msg(2218, 4, "2: Stuttering")
        + STATS
    )
    out = tlc.parse_output(text, 13)
    assert out["violated"] == "temporal" and out["errors"] == []
    assert out["loop_to"] == "stuttering" and len(out["trace"]) == 1


def test_missing_operator_is_an_error_not_a_hold():
    text = VERSION + msg(
        2233, 1, "The invariant LeaseMutexx specified in the configuration file\nis not defined."
    )
    out = tlc.parse_output(text, 150)
    assert out["errors"] and not out["success"] and not out["violated"]


def test_crash_without_result_is_an_error():
    out = tlc.parse_output(VERSION + "Exception in thread main java.lang.OutOfMemoryError\n", 1)
    assert out["errors"] and not out["success"]


def test_run_tlc_reports_missing_java(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA", str(tmp_path / "no-such-java"))
    cfg = tmp_path / "X.cfg"
    cfg.write_text("SPECIFICATION Spec\n")
    (tmp_path / "X.tla").write_text("---- MODULE X ----\n====\n")
    res = tlc.run_tlc(cfg, workers=1, heap="256m", timeout=30)
    assert res["errors"] and "java" in res["errors"][0] and not res["success"]
