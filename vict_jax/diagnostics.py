"""VICT's interface diagnostics (SPEC §4.6; VICT Tables 5 and 12) as numbers and a table.

Rollout-level abstentions (conformance, near-tie, core search failed, budget, uncertainty band)
are percentages of rollouts; atom-level ones (too few supported, zero scale, terminal-only,
missing proof support) are percentages of the non-zero marginals ``δ[i, j]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vict_jax.audit import Audit
from vict_jax.core import ABSTENTIONS
from vict_jax.pipeline import GroupCredit
from vict_jax.redistribution import Redistributed, eligibility_violations

ATOM_ABSTENTIONS = ("too-few-supported", "zero-scale", "terminal-only", "missing-proof-support")


def diagnostics(groups: Sequence[GroupCredit], result: Redistributed, inputs: dict,
                turn_valid: np.ndarray, audit: Audit | None = None) -> dict[str, float]:
    """Table 5/12 numbers for one batch.

    Args:
      groups: the batch's GroupCredits, in row order.
      result: the kernel's output for the batch.
      inputs: the kernel inputs from ``batch_inputs`` (marginals, eligible, omega).
      turn_valid: bool [B, T] of the batch.
      audit: the conformance audit of these tasks, if one was run.

    Returns:
      A flat dict of floats (percentages end in ``_pct``).
    """
    rows = sum(len(g.rollouts) for g in groups)
    vict = np.asarray(result.corrections)[:rows]
    valid = np.asarray(turn_valid)[:rows]
    marginals = inputs["marginals"][:rows]
    omega = inputs["omega"][:rows]
    nonzero_delta = marginals != 0
    has_edge = omega.any(axis=1)
    credited = (vict != 0) & valid
    violations = int(eligibility_violations(result.corrections, result.normalised.values,
                                            inputs["eligible"], inputs["omega"]))
    reasons = [r for g in groups for r in g.reasons]
    cores = [len(a.core) for g in groups for a in g.attributions if a.reason is None]
    out = {
        "atoms_per_task": float(np.mean([len(g.verifier.atoms) for g in groups])),
        "eligibility_pass_pct": 100.0 * (1 - violations / max(int(credited.sum()), 1)),
        "proof_coverage_pct": _pct((nonzero_delta & has_edge).sum(), nonzero_delta.sum()),
        "trigger_rate_pct": _pct(credited.any(axis=1).sum(), rows),
        "sparsity_pct": _pct(credited.sum(), valid.sum()),
        "nonzero_actions_per_trajectory": float(credited.sum() / max(rows, 1)),
        "core_size_mean": float(np.mean(cores)) if cores else 0.0,
        "core_size_std": float(np.std(cores)) if cores else 0.0,
        "budget_hit_pct": _pct(sum(a.budget_hit for g in groups for a in g.attributions), rows),
    }
    if audit is not None:
        out["reconstruction_pct"] = audit.reconstruction_pct
        out["mutation_conformance_pct"] = audit.mutation_pct
    for reason in ABSTENTIONS:
        out[f"abstain_{reason}_pct"] = _pct(reasons.count(reason), rows)
    atom_reasons = [r for g in groups for r in g.atom_reasons.values()]
    norm = result.normalised
    counts = {
        "too-few-supported": int(np.asarray(norm.too_few)[:rows].sum()),
        "zero-scale": int(np.asarray(norm.zero_scale)[:rows].sum()),
        "terminal-only": atom_reasons.count("terminal-only"),
        "missing-proof-support": atom_reasons.count("missing-proof-support"),
    }
    for reason in ATOM_ABSTENTIONS:
        out[f"abstain_{reason}_pct"] = _pct(counts[reason], nonzero_delta.sum())
    return out


def table(numbers: dict[str, float]) -> str:
    """A two-column markdown table of ``diagnostics`` output."""
    lines = ["| diagnostic | value |", "|---|---:|"]
    lines += [f"| {name} | {value:.2f} |" for name, value in numbers.items()]
    return "\n".join(lines)


def _pct(part, whole) -> float:
    return 100.0 * float(part) / float(whole) if whole else 0.0
