"""The EMULATED model stub, called through the official anthropic SDK over real HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import anthropic
import pytest

from world.model_stub import MODEL, ModelStub, case_of, decide_amount


@pytest.fixture
def stub():
    s = ModelStub().start()
    yield s
    s.stop()


def _admin(url: str, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def test_sdk_round_trip_has_the_messages_shape_and_is_labeled(stub):
    client = anthropic.Anthropic(base_url=stub.url, api_key="emulated", max_retries=0)
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": json.dumps({"case": "case-4471"})}],
    )
    msg = raw.parse()
    client.close()
    assert raw.headers["X-Emulated"] == "model-variance"
    assert msg.type == "message" and msg.role == "assistant" and msg.model == MODEL
    assert msg.stop_reason == "end_turn"
    assert [b.type for b in msg.content] == ["text"]
    assert json.loads(msg.content[0].text) == {"amount": 2000}
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0

    out = decide_amount(stub.url, "case-9")
    assert out["amount"] == 2000 and out["model"] == MODEL
    assert out["emulated"] == "model-variance"
    assert set(out["usage"]) == {"input_tokens", "output_tokens"}


def test_redecide_answers_2000_then_3000_per_case(stub):
    stub.configure(redecide=True)
    assert [decide_amount(stub.url, "c1")["amount"] for _ in range(3)] == [2000, 3000, 3000]
    assert decide_amount(stub.url, "c2")["amount"] == 2000  # per case


def test_without_redecide_always_2000(stub):
    assert [decide_amount(stub.url, "c1")["amount"] for _ in range(3)] == [2000] * 3


def test_admin_config_and_call_log(stub):
    status, headers, cfg = _admin(stub.url, "GET", "/admin/config")
    assert status == 200 and cfg["emulated"] is True and cfg["redecide"] is False
    assert "EMULATED" in cfg["emulation"] and headers["X-Emulated"] == "model-variance"
    status, _, cfg = _admin(stub.url, "POST", "/admin/config", {"redecide": True})
    assert status == 200 and cfg["redecide"] is True and stub.redecide is True
    status, _, err = _admin(stub.url, "POST", "/admin/config", {"nope": 1})
    assert status == 400 and err["type"] == "error"

    decide_amount(stub.url, "case-a", worker="w1")
    decide_amount(stub.url, "case-a", context={"payment": "pay_881", "nested": {"k": 1}})
    decide_amount(stub.url, "case-b")
    status, _, calls = _admin(stub.url, "GET", "/admin/calls")
    assert status == 200
    assert [(c["n"], c["case"], c["call"], c["amount"]) for c in calls] == [
        (1, "case-a", 1, 2000),
        (2, "case-a", 2, 3000),
        (3, "case-b", 1, 2000),
    ]
    assert calls[0]["worker"] == "w1" and all(c["emulated"] for c in calls)
    assert all(c["model"] == MODEL and c["end"] >= c["arrival"] for c in calls)
    assert [c["n"] for c in stub.calls("case-a")] == [1, 2]
    _, _, only_b = _admin(stub.url, "GET", "/admin/calls?case=case-b")
    assert [c["n"] for c in only_b] == [3]
    assert _admin(stub.url, "POST", "/admin/reset", {})[2] == {"cleared": 3}
    assert stub.calls() == []


def test_case_id_sources():
    assert (
        case_of({"messages": [{"role": "user", "content": 'x {"case": "k1", "a": 1} y'}]}) == "k1"
    )
    blocks = [{"type": "text", "text": "hi"}, {"type": "text", "text": '{"case": "k2"}'}]
    assert case_of({"messages": [{"role": "user", "content": blocks}]}) == "k2"
    assert case_of({"messages": [], "metadata": {"user_id": "k3"}}) == "k3"
    assert case_of({"messages": [{"role": "user", "content": "no case"}]}) == ""


def test_errors_use_the_api_error_shape(stub):
    status, headers, body = _admin(stub.url, "POST", "/v1/messages", {"messages": []})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert headers["X-Emulated"] == "model-variance"
    status, _, body = _admin(stub.url, "GET", "/v1/nothing")
    assert status == 404 and body["error"]["type"] == "not_found_error"


def test_cli_prints_its_url_and_serves():
    proc = subprocess.Popen([sys.executable, "-m", "world.model_stub", "--redecide"],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        info = json.loads(proc.stdout.readline())
        assert "EMULATED" in info["emulated"]
        assert [decide_amount(info["url"], "c")["amount"] for _ in range(2)] == [2000, 3000]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0
