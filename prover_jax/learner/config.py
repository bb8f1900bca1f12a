"""Learner configuration: loss, optimizer and train-step options as frozen dataclasses.

All three are hashable, so they are static under `jit`: changing a field compiles a new step.
Every field is checked when the dataclass is built, and a bad value raises a `ValueError` that
names the field.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from prover_jax.config import check_choice

Aggregation = Literal["token-mean", "sequence-mean", "dr-grpo"]
KlEstimator = Literal["k1", "k3"]
ImportanceCorrection = Literal["none", "tis", "mis"]
Decay = Literal["constant", "cosine", "linear"]
ComputeDtype = Literal["float32", "bfloat16"]

AGGREGATIONS: tuple[Aggregation, ...] = ("token-mean", "sequence-mean", "dr-grpo")
KL_ESTIMATORS: tuple[KlEstimator, ...] = ("k1", "k3")
IS_CORRECTIONS: tuple[ImportanceCorrection, ...] = ("none", "tis", "mis")
DECAYS: tuple[Decay, ...] = ("constant", "cosine", "linear")
COMPUTE_DTYPES: tuple[ComputeDtype, ...] = ("float32", "bfloat16")


def _check_range(name: str, value: float, low: float, high: float = float("inf"),
                 low_open: bool = False) -> None:
    below = value <= low if low_open else value < low
    if below or value > high:
        bounds = f"{'(' if low_open else '['}{low}, {high}]"
        raise ValueError(f"{name} must lie in {bounds}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """PPO-clip policy loss with an optional KL penalty to a reference policy, and optionally
    the decoupled objective that corrects for the sampler (the behaviour policy) differing from
    the learner (precision, kernels, staleness).

    Three log-probabilities per token: the behaviour policy's (the sampler's, `old_logprobs`),
    the proximal policy's (the learner's own at the start of the update) and the current
    policy's. Without a correction (``is_correction="none"``) the PPO ratio is current /
    behaviour. With one, PPO's ratio and clip are current / proximal, and each token's term is
    multiplied by an importance weight of w = proximal / behaviour:
    ``"tis"`` (truncated) ``min(w, is_cap)``; ``"mis"`` (masked) ``w`` where
    ``1 / is_cap <= w <= is_cap`` and 0 elsewhere (the token leaves the loss).

    Attributes:
      clip_low: ratios below `1 - clip_low` are clipped (for negative advantages).
      clip_high: ratios above `1 + clip_high` are clipped (for positive advantages); a larger
        value than `clip_low` is DAPO's "clip-higher".
      kl_coef: weight of the KL estimate in the loss; 0 disables it and the reference
        log-probabilities are not needed.
      kl_estimator: "k1" (`log π - log π_ref`) or "k3" (`r - log r - 1`, `r = π_ref / π`).
      aggregation: how token terms become one scalar: "token-mean" over all loss tokens of the
        batch, "sequence-mean" (mean over sequences of each sequence's token mean) or "dr-grpo"
        (the token sum divided by the number of sequences times a constant length).
      dr_grpo_length: Dr.GRPO's constant length; None uses the padded length L of the batch.
      is_correction: "none", "tis" or "mis" (above).
      is_cap: C > 1, the importance weight's truncation (tis) or band (mis).
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    kl_estimator: KlEstimator = "k3"
    aggregation: Aggregation = "token-mean"
    dr_grpo_length: int | None = None
    is_correction: ImportanceCorrection = "none"
    is_cap: float = 2.0

    def __post_init__(self):
        _check_range("clip_low", self.clip_low, 0.0, 1.0, low_open=True)
        _check_range("clip_high", self.clip_high, 0.0, low_open=True)
        _check_range("kl_coef", self.kl_coef, 0.0)
        check_choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        check_choice("aggregation", self.aggregation, AGGREGATIONS)
        check_choice("is_correction", self.is_correction, IS_CORRECTIONS)
        _check_range("is_cap", self.is_cap, 1.0, low_open=True)
        if self.dr_grpo_length is not None:
            _check_range("dr_grpo_length", self.dr_grpo_length, 0, low_open=True)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW with global-norm clipping and a warmup-then-decay learning-rate schedule.

    Attributes:
      learning_rate: peak learning rate.
      warmup_steps: linear warmup from 0 to the peak over this many steps.
      decay: "constant" after warmup, or "cosine" / "linear" decay to
        `final_lr_fraction * learning_rate` at `total_steps`.
      total_steps: length of the schedule (needed by "cosine" and "linear").
      final_lr_fraction: where the decay ends, as a fraction of the peak.
      b1, b2, eps: Adam moments and denominator epsilon.
      weight_decay: decoupled weight decay, applied to matrices only (not norms or biases).
      max_grad_norm: clip the global gradient norm to this; None disables clipping.
    """

    learning_rate: float = 1e-6
    warmup_steps: int = 0
    decay: Decay = "constant"
    total_steps: int = 0
    final_lr_fraction: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    max_grad_norm: float | None = 1.0

    def __post_init__(self):
        _check_range("learning_rate", self.learning_rate, 0.0)
        _check_range("warmup_steps", self.warmup_steps, 0)
        check_choice("decay", self.decay, DECAYS)
        if self.decay != "constant" and self.total_steps <= self.warmup_steps:
            raise ValueError(f"decay={self.decay!r} needs total_steps > warmup_steps, got "
                             f"total_steps={self.total_steps}, warmup_steps={self.warmup_steps}")
        _check_range("final_lr_fraction", self.final_lr_fraction, 0.0, 1.0)
        _check_range("b1", self.b1, 0.0, 1.0)
        _check_range("b2", self.b2, 0.0, 1.0)
        _check_range("eps", self.eps, 0.0)
        _check_range("weight_decay", self.weight_decay, 0.0)
        if self.max_grad_norm is not None:
            _check_range("max_grad_norm", self.max_grad_norm, 0.0, low_open=True)


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Everything the train step needs besides the model config and the mesh.

    Attributes:
      loss: LossConfig.
      optimizer: OptimizerConfig.
      micro_batches: the batch is split into this many micro-batches whose gradients are
        accumulated (rows per micro-batch = B / micro_batches, which must also divide by the
        data-parallel size).
      compute_dtype: dtype of the forward and backward pass; master weights, gradients and
        optimizer state stay float32.
      remat: recompute each layer's activations in the backward pass instead of keeping them
        (less memory, about one more forward pass of compute).
      logits_chunk: the LM head and log-softmax run over this many positions of every row at
        a time (`loss.head_logprobs`).
      recompute_logits: the backward pass recomputes each chunk's logits, so nothing
        [B, L, V] is kept, for one more head matmul. False keeps the logits instead
        (float32 [B / micro_batches, L, V] per micro-batch): faster where that fits.
      head_buckets: the train step runs the LM head on the trained tokens only, gathered into
        P slots per row: the most trained tokens of any row rounded up to a multiple of
        L / head_buckets (`step.head_positions`). Prompt and observation tokens then cost no
        head matmul; each bucket is one more compiled step. 1 runs the head on every token.
      head_per_device: the LM head runs on each device's rows (`loss.head_logprobs` with the
        mesh): its weights are gathered once per micro-batch rather than in every logits
        chunk, and its float32 gradient is reduce-scattered once per micro-batch rather than
        all-reduced whole in every chunk, for more memory (the TPU compiler keeps the gathered
        head through the micro-batch, and a padded float32 copy of the gradient for the
        reduce-scatter; `tpu.plan` counts both).
    """

    loss: LossConfig = LossConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    micro_batches: int = 1
    compute_dtype: ComputeDtype = "bfloat16"
    remat: bool = False
    logits_chunk: int = 128
    recompute_logits: bool = True
    head_buckets: int = 4
    head_per_device: bool = False

    def __post_init__(self):
        for name, kind in (("loss", LossConfig), ("optimizer", OptimizerConfig)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got "
                                 f"{type(getattr(self, name)).__name__}")
        _check_range("micro_batches", self.micro_batches, 1)
        _check_range("logits_chunk", self.logits_chunk, 1)
        _check_range("head_buckets", self.head_buckets, 1)
        check_choice("compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
