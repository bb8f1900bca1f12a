"""The sampling and evaluation settings as frozen dataclasses, importable without JAX: the
trainer's, SFT's and the evaluator's command lines read and check them before anything heavy
loads (`prover_jax.model_policy` samples with a `SamplingConfig`, `prover_jax.evaluate` runs an
`EvalConfig`).
"""

from __future__ import annotations

import dataclasses

from prover_jax.config import check_choice

SAMPLING_DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How the policy samples (temperature 0 is greedy).

    ``max_context`` caps an episode's token stream (None: the model's
    ``max_position_embeddings``). ``dtype`` is that of the weights and the KV cache while
    sampling ("bfloat16" halves both; the log-probabilities stay float32).
    ``reuse_cache=False`` prefills every episode's whole stream into a fresh cache at every turn
    (the reference path: same tokens, quadratic cost).
    """

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_prompt_tokens: int = 64  # the smallest bucket of new tokens per call
    max_context: int | None = None
    reuse_cache: bool = True
    dtype: str = "float32"

    def __post_init__(self):
        check_choice("sampling.dtype", self.dtype, SAMPLING_DTYPES)
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 0")
        if self.max_context is not None and self.max_context <= self.max_new_tokens:
            raise ValueError(f"max_context={self.max_context} leaves no room for a prompt "
                             f"and max_new_tokens={self.max_new_tokens}")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """What an evaluation runs.

    Attributes:
      split: the held-out tasks (None: `eval_split`).
      tasks: how many of them, in order (None: all).
      samples: sampled episodes per task (pass^k up to k = samples); 0 skips sampling.
      greedy: also run one greedy episode per task.
      max_actions: cap per episode (None: the environment's turn limit).
      max_new_tokens: per reply (None: 32, or the training run's).
      seed: the sampled episodes' randomness.
    """

    split: str | None = None
    tasks: int | None = 50
    samples: int = 1
    greedy: bool = True
    max_actions: int | None = None
    max_new_tokens: int | None = None
    seed: int = 0

    def __post_init__(self):
        if self.samples < 0 or (self.tasks is not None and self.tasks < 1):
            raise ValueError(f"need samples >= 0 and tasks >= 1, got {self.samples}, "
                             f"{self.tasks}")
        if not self.greedy and not self.samples:
            raise ValueError("nothing to run: greedy is off and samples is 0")
