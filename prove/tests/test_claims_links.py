"""The registry of quantitative claims (docs/claims.yaml, prove/doc_claims.py): every claim in
README.md and docs/*.md names its assumptions and links to a result that exists, and no
quantitative sentence goes unregistered. The synthetic pages below break each rule once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prove import doc_claims

REPO = Path(__file__).resolve().parents[2]


def test_the_docs_claims_hold_and_none_is_unregistered():
    problems = doc_claims.check(doc_claims.load_registry(), doc_claims.claim_pages())
    assert not problems, "docs/claims.yaml and the docs disagree (python -m prove.doc_claims):\n" + "\n".join(map(str, problems))  # fmt: skip


def test_the_evidence_of_every_claim_is_current():
    index = REPO / doc_claims.INDEX
    if not index.exists():
        pytest.skip(
            f"{doc_claims.INDEX} does not exist yet (`python -m prove.freshness` writes it)"
        )
    statuses = doc_claims.index_statuses(json.loads(index.read_text()))
    stale = doc_claims.stale_evidence(doc_claims.load_registry(), statuses, REPO)
    assert not stale, "claims resting on results that are not current:\n" + "\n".join(map(str, stale))  # fmt: skip


def test_the_evidence_of_every_claim_recomputes_from_its_raw_data():
    from prove import verify_results

    verified = {o.name: o.status for o in verify_results.run()}
    bad = doc_claims.unverified_evidence(doc_claims.load_registry(), verified, REPO)
    assert not bad, "claims resting on reports that do not verify:\n" + "\n".join(map(str, bad))


def test_every_result_awaiting_regeneration_still_awaits_it():
    from prove import verify_results

    index = REPO / doc_claims.INDEX
    statuses = doc_claims.index_statuses(json.loads(index.read_text()))
    verified = {o.name: o.status for o in verify_results.run()}
    done = doc_claims.awaiting_done(doc_claims.load_registry(), statuses, verified)
    assert not done, "\n".join(map(str, done))


def test_a_result_awaiting_regeneration_is_excused_until_it_is_current():
    registry = {"claims": [{"file": "README.md", "quote": "q", "none": True,
                            "evidence": ["results/soak.md#x"]}],
                "awaiting_regeneration": [{"result": "results/soak.md", "reason": "r"}]}  # fmt: skip
    stale = {"results/soak.md": "stale"}
    assert doc_claims.stale_evidence(registry, stale, REPO) == []
    assert doc_claims.unverified_evidence(registry, {"results/soak.md": "unverifiable"}, REPO) == []
    assert doc_claims.awaiting_done(registry, stale, {}) == []
    (p,) = doc_claims.awaiting_done(registry, {"results/soak.md": "current"}, {})
    assert "take it off" in p.what
    # verified too, where a verifier covers it
    assert doc_claims.awaiting_done(registry, {"results/soak.md": "current"},
                                    {"results/soak.md": "unverifiable"}) == []  # fmt: skip
    registry["awaiting_regeneration"] = []
    assert len(doc_claims.stale_evidence(registry, stale, REPO)) == 1


def test_an_unverified_report_fails_its_claims():
    registry = {"claims": [{"file": "README.md", "quote": "q", "none": True,
                            "evidence": ["results/soak.md#x"]}]}  # fmt: skip
    assert doc_claims.unverified_evidence(registry, {"results/soak.md": "verified"}, REPO) == []
    (p,) = doc_claims.unverified_evidence(registry, {"results/soak.md": "unverifiable"}, REPO)
    assert p.kind == "unverified" and "unverifiable" in p.what


def test_the_scanned_pages_are_readme_and_docs_but_results_md():
    pages = doc_claims.claim_pages()
    assert "README.md" in pages and "docs/design.md" in pages and "docs/async.md" in pages
    assert "docs/results.md" not in pages and "docs/cli.md" not in pages


# Synthetic pages: a repository of two results and one page.

RESULT = '# Soak\n\n## Outcomes by tier\n\n<a id="row-1"></a>\n'
PROVE = {"cells": [{"scenario": "S08c", "tier": 2, "variant": "base", "api": "local"},
                   {"scenario": "S01", "tier": 1, "variant": "base", "api": "stripe"}]}  # fmt: skip
PAGE = """# Effects {#effects}

Each effect is applied at most once at tier 2 (assumptions A1, A2; `results/soak.md#outcomes-by-tier`,
`results/runtime_prove.md#cell-s08c-t2-base`).

The worker's poll is 2 s by default.
"""
CLAIM = {"file": "docs/page.md", "quote": "applied at most once at tier 2",
         "assumptions": ["A1", "A2"],
         "evidence": ["results/soak.md#outcomes-by-tier",
                      "results/runtime_prove.md#cell-s08c-t2-base"]}  # fmt: skip
EXEMPT = {"file": "docs/page.md", "quote": "poll is 2 s", "reason": "configuration"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "results").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "results/soak.md").write_text(RESULT)
    (tmp_path / "results/runtime_prove.md").write_text("# Prove\n")
    (tmp_path / "results/runtime_prove.json").write_text(json.dumps(PROVE))
    return tmp_path


def kinds(
    page: str, root: Path, claim: dict | None = None, exempt: list | None = None
) -> list[str]:
    registry = {"claims": [claim or CLAIM], "exempt": [EXEMPT] if exempt is None else exempt}
    return [p.kind for p in doc_claims.check(registry, {"docs/page.md": page}, root)]


def test_a_page_that_keeps_its_claims_passes(root: Path):
    assert kinds(PAGE, root) == []


def test_a_claim_whose_paragraph_drops_an_assumption_fails(root: Path):
    assert kinds(PAGE.replace("assumptions A1, A2", "assumption A1"), root) == ["assumption"]


def test_an_assumption_named_in_another_paragraph_does_not_count(root: Path):
    page = PAGE.replace("assumptions A1, A2", "assumption A1") + "\nSee A2.\n"
    assert kinds(page, root) == ["assumption"]


def test_a_range_of_assumptions_names_each(root: Path):
    assert kinds(PAGE.replace("assumptions A1, A2", "assumptions A1..A5"), root) == []
    assert doc_claims.named_assumptions("A2 to A4, and A5") == {"A2", "A3", "A4", "A5"}


def test_a_claim_whose_paragraph_lacks_its_link_fails(root: Path):
    page = PAGE.replace("`results/runtime_prove.md#cell-s08c-t2-base`", "S08c")
    assert kinds(page, root) == ["link"]


def test_a_longer_link_does_not_stand_for_the_registered_one(root: Path):
    page = PAGE.replace("#outcomes-by-tier`", "#outcomes-by-tier-2`")
    assert kinds(page, root) == ["link"]


def test_a_broken_anchor_fails(root: Path):
    claim = dict(CLAIM, evidence=["results/soak.md#outcomes-per-tier"])
    page = PAGE.replace("#outcomes-by-tier", "#outcomes-per-tier")
    assert kinds(page, root, claim) == ["unresolved"]


def test_a_missing_result_file_fails(root: Path):
    claim = dict(CLAIM, evidence=["results/soak2.md#outcomes-by-tier"])
    page = PAGE.replace("results/soak.md", "results/soak2.md")
    assert kinds(page, root, claim) == ["unresolved"]


def test_a_prove_cell_anchor_resolves_only_to_a_local_cell_in_the_json(root: Path):
    for cell in ("cell-s08c-t1-base", "cell-s08c-t2-long", "cell-s01-t1-base", "cell-s08c"):
        claim = dict(CLAIM, evidence=[f"results/runtime_prove.md#{cell}"])
        page = PAGE.replace("cell-s08c-t2-base", cell)
        assert kinds(page, root, claim) == ["unresolved"], cell


def test_an_explicit_anchor_in_the_report_resolves(root: Path):
    claim = dict(CLAIM, evidence=["results/soak.md#row-1"])
    assert kinds(PAGE.replace("#outcomes-by-tier", "#row-1"), root, claim) == []


def test_a_quote_no_longer_in_its_file_fails(root: Path):
    page = PAGE.replace("applied at most once at tier 2", "applied once")
    assert "missing-quote" in kinds(page, root)


def test_an_unregistered_percentage_fails_and_its_exemption_passes(root: Path):
    page = PAGE + "\nThe claim takes 17 ms, 90% of it in the ranking.\n"
    assert kinds(page, root) == ["unregistered"]
    waived = [EXEMPT, {"file": "docs/page.md", "quote": "takes 17 ms", "reason": "example"}]
    assert kinds(page, root, exempt=waived) == []


@pytest.mark.parametrize(
    "sentence",
    ["Tier 2 is never applied twice.", "It ran 5/5 correct.", "It ran 4 of 5 correct.",
     "It does 713 wf/s.", "It sends at most once.", "It never duplicates.", "It held 20 iterations."],
)  # fmt: skip
def test_each_kind_of_quantitative_sentence_needs_a_registry_entry(root: Path, sentence: str):
    assert kinds(PAGE + f"\n{sentence}\n", root) == ["unregistered"]


def test_code_blocks_and_code_spans_are_not_claims(root: Path):
    page = PAGE + "\n```sh\nsleep 5 s  # 50%\n```\n\nSet `timeout=5 s` here.\n"
    assert kinds(page, root) == []


def test_an_unexempted_configuration_value_fails(root: Path):
    assert kinds(PAGE, root, exempt=[]) == ["unregistered"]


def test_a_registry_entry_without_assumptions_or_evidence_is_refused(root: Path):
    assert kinds(PAGE, root, dict(CLAIM, none=True)) == ["registry"]
    assert kinds(PAGE, root, {k: v for k, v in CLAIM.items() if k != "assumptions"}) == ["registry"]
    assert kinds(PAGE, root, dict(CLAIM, evidence=[])) == ["registry"]
    assert kinds(PAGE, root, dict(CLAIM, assumptions=["A6"])) == ["registry"]


def test_table_rows_and_list_items_are_paragraphs_of_their_own():
    units = doc_claims.paragraphs("| a | A1 |\n| b | c |\n\n- one A2\n  more\n- two\n")
    assert units == ["| a | A1 |", "| b | c |", "- one A2 more", "- two"]


def test_heading_slugs_as_github_and_the_docs_site_write_them():
    text = "## 0b. The rule (fixed)\n\n## Shape 1: one step\n\n## Shape 1: one step\n\n## A1: x {#a1}\n"
    found = doc_claims.anchors(text)
    assert {"0b-the-rule-fixed", "shape-1-one-step", "shape-1-one-step-1", "a1"} <= found


def test_index_statuses_and_stale_evidence(root: Path):
    index = {"results": [{"files": ["results/soak.md", "results/soak.json"], "status": "current"},
                         {"files": ["runtime_prove.md"], "status": "stale"}]}  # fmt: skip
    statuses = doc_claims.index_statuses(index)
    assert statuses["results/soak.md"] == "current"
    assert statuses["results/runtime_prove.md"] == "stale"
    registry = {"claims": [CLAIM]}
    stale = doc_claims.stale_evidence(registry, statuses, root)
    assert [p.what for p in stale] == ["results/runtime_prove.md#cell-s08c-t2-base: stale"]
    missing = doc_claims.stale_evidence(registry, {"results/soak.md": "current"}, root)
    assert [p.what for p in missing] == ["results/runtime_prove.md#cell-s08c-t2-base: not in the index"]  # fmt: skip
