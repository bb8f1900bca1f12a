"""The learner: PPO-clip loss over the padded batch, the sharded train step, checkpoints.

`Learner(model_cfg, LearnerConfig(...), mesh)` compiles `train_step(state, TrainBatch)` and
`logprobs(params, tokens)`; `Checkpoints(directory)` saves and restores a `TrainState`.
"""

from prover_jax.learner.checkpoint import Checkpoints
from prover_jax.learner.config import LearnerConfig, LossConfig, OptimizerConfig
from prover_jax.learner.loss import (
    head_logprobs,
    loss_weights,
    next_token_logprobs,
    policy_loss,
    token_terms,
    trained_tokens,
    weighted_loss,
)
from prover_jax.learner.step import (
    Learner,
    TrainBatch,
    TrainState,
    head_positions,
    policy_logprobs,
    train_step,
    validate_train_batch,
)

__all__ = [
    "Checkpoints", "Learner", "LearnerConfig", "LossConfig", "OptimizerConfig", "TrainBatch",
    "TrainState", "head_logprobs", "head_positions", "loss_weights", "next_token_logprobs",
    "policy_logprobs", "policy_loss", "token_terms", "train_step", "trained_tokens",
    "validate_train_batch", "weighted_loss",
]
