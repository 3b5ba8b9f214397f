"""An author's path end to end, on a scratch copy: a new scenario that names a claim is counted
by that claim in the report a working run writes, and results/ stays byte for byte the same.

The sweep itself is stood in for by run files the committed pack holds (S03's tier-1 runs,
relabelled as the new scenario's): real run files, judged by the real report code, without
spending minutes on runs. Postgres is started for real, as `python -m prove` does."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from prove import __main__ as cli
from prove import prove_raw, report, runner
from world.verify_common import tree_hash


def _as_s15(runs: list[dict]) -> list[dict]:
    out = []
    for r in runs:
        r = copy.deepcopy(r)
        i = r["identity"]
        if i["scenario"] == "S03" and i["tier"] == 1 and i.get("api", "local") == "local":
            i["scenario"] = "S15"
            i["run_id"] = i["run_id"].replace("S03-", "S15-", 1)
            out.append(r)
    return out


@pytest.mark.pg
@pytest.mark.parametrize("named", ["[C3]", "[]"])
def test_a_new_scenario_naming_a_claim_is_counted_by_it(tmp_path, monkeypatch, capsys,
                                                        named) -> None:  # fmt: skip
    before = tree_hash(report.RESULTS)
    scenarios = tmp_path / "scenarios"
    shutil.copytree(runner.REPO / "scenarios", scenarios)
    text = (scenarios / "S03.yaml").read_text().replace("id: S03", "id: S15", 1)
    text = text.replace("claims: [C3]", f"claims: {named}", 1)
    (scenarios / "S15.yaml").write_text(text)
    pack, _ = prove_raw.load(report.RESULTS / prove_raw.DIRNAME)
    monkeypatch.setattr(runner, "sweep", lambda *a, **k: _as_s15(pack))
    monkeypatch.setattr(cli, "WORK", tmp_path / "work")

    code = cli.main(["--scenario-dir", str(scenarios), "--scenarios", "S15", "--systems",
                     "runtime", "--tiers", "1", "--seeds", "1", "--no-stripe", "--no-zygote"])  # fmt: skip
    assert code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    out = tmp_path / "work" / "results"
    assert str(out / "runtime_prove.md") in last or "work/results/runtime_prove.md" in last, last
    c3 = next(c for c in json.loads((out / "runtime_prove.json").read_text())["claims"]
              if c["id"] == "C3")  # fmt: skip
    if named == "[C3]":
        assert [r["cell"] for r in c3["rows"]] == ["S15 t1"] and c3["runtime_n"] == 5, c3
        assert c3["status"].startswith("supported"), c3["status"]
        assert "| S15 t1 | 5/5 |" in (out / "runtime_prove.md").read_text()
    else:
        assert c3["rows"] == [] and c3["status"] == "not measured in this sweep", c3
    assert tree_hash(report.RESULTS) == before
