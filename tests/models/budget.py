"""Float32 error budgets derived from a float64 reference, for comparing against transformers.

A float32 network differs from the exact function by rounding that grows with depth, width and
conditioning: on the test models, transformers' own float32 logits are off by 1.5e-6 to 3.4e-6
for attention models and by up to 1.3e-4 for the random Gated DeltaNet model. A fixed `atol`
is then either meaningless for one model or flaky for another CPU, whose BLAS sums in another
order.

So each comparison runs the reference implementation twice on the same inputs: in float64
(exact for this purpose) and in float32. The reference's float32 error measures what rounding
does to this model on this machine, and ours must stay within

    FACTOR * max|reference32 - reference64| + ULPS * eps32 * max|reference64|

- FACTOR = 8: measured on the test models, our max error is 0.7-2.5x transformers' for logits
  and every gradient tensor (query blocks, chunked DeltaNet and fused matmuls sum in other,
  equally valid orders), and 4.8x for the recurrent DeltaNet form over 95 tokens, which
  accumulates sequentially where transformers' runs in chunks. A real defect, such as a swapped
  head, a missing norm or a wrong rotary fraction, is far larger
  (`test_a_wrong_model_exceeds_the_budget`).
- ULPS = 8: a float32 result is off by half an ulp even when computed exactly, so the budget never
  falls below a few ulps of the largest value, even where the reference's error happens to be 0.

Two float32 evaluations of ours (sharded and not, decoded and not) that are each within budget of
the float64 reference differ by at most twice the budget; tests check each against the reference.
"""

from __future__ import annotations

import numpy as np

FACTOR = 8.0
ULPS = 8.0
EPS32 = float(np.finfo(np.float32).eps)


def budget(reference64: np.ndarray, reference32: np.ndarray) -> float:
    """The largest error a correct float32 implementation may have on these values."""
    reference64 = np.asarray(reference64, np.float64)
    error = np.max(np.abs(np.asarray(reference32, np.float64) - reference64), initial=0.0)
    return FACTOR * error + ULPS * EPS32 * np.max(np.abs(reference64), initial=0.0)


def assert_within_budget(ours, reference64, reference32, what: str = "logits") -> None:
    """Asserts max|ours - reference64| <= budget(reference64, reference32), saying by how much."""
    ours, reference64 = np.asarray(ours, np.float64), np.asarray(reference64, np.float64)
    assert ours.shape == reference64.shape, (what, ours.shape, reference64.shape)
    allowed = budget(reference64, reference32)
    error = np.max(np.abs(ours - reference64), initial=0.0)
    assert error <= allowed, (f"{what}: max error {error:.3g} against the float64 reference "
                              f"exceeds the float32 budget {allowed:.3g}")


class Reference:
    """A transformers model evaluated in float32 and in float64 (a double-precision copy)."""

    def __init__(self, model):
        import copy

        self.model32 = model.eval()
        self.model64 = copy.deepcopy(model).double().eval()

    def logits(self, tokens: np.ndarray, mask: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """(float64, float32) logits [B, L, V] of int tokens [B, L] (mask: bool [B, L])."""
        import torch

        with torch.no_grad():
            kwargs = ({} if mask is None else
                      {"attention_mask": torch.tensor(np.asarray(mask).astype(np.int64))})
            ids = torch.tensor(np.asarray(tokens).astype(np.int64))
            return (self.model64(ids, **kwargs).logits.numpy(),
                    self.model32(ids, **kwargs).logits.numpy())

    def assert_logits(self, ours, tokens, mask=None, select=None) -> None:
        """Our float32 logits within budget of the reference's; `select` indexes both."""
        reference64, reference32 = self.logits(tokens, mask)
        if select is not None:
            reference64, reference32 = reference64[select], reference32[select]
        assert_within_budget(ours, reference64, reference32)
