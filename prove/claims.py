"""The claims README.md makes about the runtime against Temporal, and the cells that test them.

The Prove report opens with these: each claim, the cells that bear on it, their n and their
verdicts, and whether the evidence decides it. The cells are the scenarios' own: each scenario
file names the claims it bears on (`claims: [C3, {C2: [1, 2]}]`, scenarios/README.md), and
bind() gives every claim the scenarios that name it. A claim is never judged from the runtime's own
records; only from the cells' correct rates (ground truth: the target's ledger and access log)
and their counters.

Expectations against a baseline:
- "better": wherever the baseline's correct rate is below the runtime's, the verdict must be
  `better` for the claim to be decided; a cell where both are equally correct shows nothing
  either way and is listed as `same`; a `worse` verdict contradicts the claim.
- "not_worse": only a `worse` verdict contradicts it. Overlapping intervals do not prove two
  systems equal, so such a claim is reported as "consistent", never as "proven".
`zero` names counters that must be 0 in every one of the claim's runtime cells (summed over
runs); a non-zero count contradicts the claim whatever the verdicts say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

BASELINES = ("temporal_idem", "temporal_check")
LABEL = {"temporal_idem": "(a)", "temporal_check": "(b)"}


@dataclass(frozen=True)
class Claim:
    id: str
    says: str  # the claim in README's terms
    vs: dict[str, str] = field(default_factory=dict)  # baseline -> "better" | "not_worse"
    zero: tuple[str, ...] = ()  # runtime counters that must be 0 in these cells
    # (scenario, tiers or None: all): filled from the scenarios' `claims:` by bind()
    cells: tuple[tuple[str, tuple[int, ...] | None], ...] = ()


CLAIMS: tuple[Claim, ...] = (
    Claim("C1", "Durable execution as good as Temporal's: a workflow survives SIGKILLed workers, "
          "two workers racing recovery, a crash of the server itself and an outage during its "
          "wait, and completes correctly",
          {"temporal_idem": "not_worse", "temporal_check": "not_worse"}),
    Claim("C2", "At most once at tiers 1 and 2: no duplicate application after a crash after the "
          "send, a lost response, a pruned idempotency key or two workers recovering at once",
          {"temporal_idem": "better", "temporal_check": "better"}, ("duplicate_applications",)),
    Claim("C3", "Only under live authority: nothing is sent under a revoked grant, whether the "
          "revoke comes during an outage or races the dispatch",
          {"temporal_idem": "better", "temporal_check": "better"}, ("sent_under_revoked_grant",)),
    Claim("C4", "Only while the facts still hold: nothing is sent after a hand refund changed "
          "the premises the decision was made on (full or partial)",
          {"temporal_idem": "better", "temporal_check": "better"}, ("sent_on_changed_premise",)),
    Claim("C5", "The approved payload only: a model that re-decides (fork or reset, or a plain "
          "re-call after a crash) never gets a second or different amount sent",
          {"temporal_idem": "better", "temporal_check": "better"},
          ("duplicate_applications", "wrong_amount")),
    Claim("C6", "Tier 3 is never resent blindly: an outcome nobody can look up is surfaced for a "
          "person instead of risking a duplicate",
          {"temporal_idem": "better", "temporal_check": "better"}, ("duplicate_applications",)),
    Claim("C7", "Under random crashes and world events mixed together, only what the event order "
          "allows is applied",
          {"temporal_idem": "better", "temporal_check": "better"}),
    Claim("C8", "Versioning as Temporal's: pinned workflows stay on their version, drain, and an "
          "unpatched change is stuck loudly with nothing sent",
          {"temporal_idem": "not_worse", "temporal_check": "not_worse"}),
)  # fmt: skip

# The cells of each claim as they were before scenarios named their claims: only for a sweep
# whose scenario files have no `claims:` field at all (a raw data pack committed before it,
# prove/prove_raw.py), so its report renders as it did. Never edited: a new scenario names
# its claims in its own file (scenarios/README.md).
CELLS_BEFORE_SCENARIOS_NAMED_CLAIMS: dict[str, tuple[tuple[str, tuple[int, ...] | None], ...]] = {
    "C1": (("S00", None), ("S01", (1,)), ("S07", (1,)), ("S10", None), ("S11", None),
           ("S11r", None)),
    "C2": (("S01", (1, 2)), ("S04", None), ("S07", (1, 2)), ("S08a", None), ("S08b", None),
           ("S13", (1, 2))),
    "C3": (("S03", None), ("S12", None)),
    "C4": (("S02", None), ("S06", None)),
    "C5": (("S05", None), ("S05b", None)),
    "C6": (("S01", (3,)), ("S07", (3,)), ("S09", None), ("S13", (3,))),
    "C7": (("MIX", None),),
    "C8": (("S14", None),),
}  # fmt: skip


class _NamesClaims(Protocol):
    id: str
    claims: tuple[tuple[str, tuple[int, ...] | None], ...] | None


def bind(scns: Sequence[_NamesClaims]) -> tuple[Claim, ...]:
    """Every claim with its cells: the scenarios that name it (in the order given), with the
    tiers they name. A sweep none of whose scenarios has a `claims:` field (an old pack) takes
    CELLS_BEFORE_SCENARIOS_NAMED_CLAIMS."""
    if scns and all(s.claims is None for s in scns):
        return tuple(replace(c, cells=CELLS_BEFORE_SCENARIOS_NAMED_CLAIMS[c.id]) for c in CLAIMS)
    return tuple(replace(c, cells=tuple((s.id, tiers) for s in scns
                                        for cid, tiers in s.claims or () if cid == c.id))
                 for c in CLAIMS)  # fmt: skip


def _differs(rt: dict, other: dict) -> bool:
    return rt["correct_rate"] != other["correct_rate"]


def judge(claim: Claim, idx: dict[tuple, dict], verdicts: dict[tuple, str]) -> dict:
    """One claim against the sweep: its cells, verdicts, and a status.

    idx: (scenario, variant, system, tier) -> cell (report.aggregate, local API);
    verdicts: (scenario, variant, tier, baseline) -> the main table's verdict text."""
    rows, contradictions, undecided, decided = [], [], [], []
    for scn, tiers in claim.cells:
        keys = sorted(k for k in idx if k[0] == scn and k[2] == "runtime"
                      and (tiers is None or k[3] in tiers))  # fmt: skip
        for _, variant, _, tier in keys:
            rt = idx[(scn, variant, "runtime", tier)]
            row = {"cell": f"{scn} t{tier}" + ("" if variant == "base" else f" {variant}"),
                   "runtime": f"{rt['correct']}/{rt['n']}", "vs": {}}  # fmt: skip
            for counter in claim.zero:
                if rt["counters"].get(counter):
                    contradictions.append(f"{row['cell']}: runtime {counter} = "
                                          f"{rt['counters'][counter]}")  # fmt: skip
            for base, expect in claim.vs.items():
                other = idx.get((scn, variant, base, tier))
                if other is None:
                    continue
                v = verdicts.get((scn, variant, tier, base), "n/a")
                row["vs"][base] = f"{other['correct']}/{other['n']}: {v}"
                if v.startswith("worse"):
                    contradictions.append(f"{row['cell']} vs {LABEL[base]}: {v}")
                elif expect == "better" and _differs(rt, other):
                    (decided if v.startswith("better") else undecided).append(
                        f"{row['cell']} vs {LABEL[base]}"
                    )
            rows.append(row)
    if not rows:
        status = "not measured in this sweep"
    elif contradictions:
        status = "CONTRADICTED"
    elif undecided:
        status = f"not decisive ({len(undecided)} comparison(s) whose intervals overlap)"
    elif decided:
        status = f"supported: decisive in all {len(decided)} comparison(s) where the rates differ"
    else:
        status = ("consistent: no cell worse (overlapping intervals do not prove equality)"
                  if "not_worse" in claim.vs.values() else
                  "no difference to show: every system was equally correct in these cells")  # fmt: skip
    n_rt = sum(idx[(s, v, "runtime", t)]["n"] for (s, v, m, t) in idx
               if m == "runtime" and any(s == c and (ts is None or t in ts)
                                         for c, ts in claim.cells))  # fmt: skip
    return {"id": claim.id, "says": claim.says, "status": status, "runtime_n": n_rt,
            "rows": rows, "contradictions": contradictions, "undecided": undecided,
            "decided": decided, "zero": list(claim.zero),
            "expect": dict(claim.vs)}  # fmt: skip


def decisive_share(table: list[dict], idx: dict[tuple, dict]) -> dict:
    """Over every comparison (row x baseline) whose point estimates differ: how many reached a
    verdict other than `equal`."""
    differ, decided, open_ = 0, 0, []
    for row in table:
        rt = idx.get((row["scenario"], row["variant"], "runtime", row["tier"]))
        for base, key in (("temporal_idem", "verdict_vs_a"), ("temporal_check", "verdict_vs_b")):
            other = idx.get((row["scenario"], row["variant"], base, row["tier"]))
            if not rt or not other or not _differs(rt, other):
                continue
            differ += 1
            if row[key].startswith("equal"):
                open_.append(f"{row['scenario']} t{row['tier']} {row['variant']} vs {LABEL[base]}")
            else:
                decided += 1
    return {"differ": differ, "decided": decided, "share": decided / differ if differ else None,
            "open": open_}  # fmt: skip
