"""The learner: PPO-clip loss over the padded batch, the sharded train step, checkpoints.

`Learner(model_cfg, LearnerConfig(...), mesh)` compiles `train_step(state, TrainBatch)` and
`logprobs(params, tokens)`; `Checkpoints(directory)` saves and restores a `TrainState`.
The names below load at first use (`prover_jax.lazy`): the configs without JAX.
"""

from prover_jax.lazy import exports

_SOURCES = {
    "Checkpoints": "checkpoint", "LearnerConfig": "config", "LossConfig": "config",
    "OptimizerConfig": "config", "head_logprobs": "loss", "loss_weights": "loss",
    "next_token_logprobs": "loss", "policy_loss": "loss", "token_terms": "loss",
    "trained_tokens": "loss", "weighted_loss": "loss", "Learner": "step", "TrainBatch": "step",
    "TrainState": "step", "head_positions": "step", "policy_logprobs": "step",
    "train_step": "step", "validate_train_batch": "step",
}
__all__ = sorted(_SOURCES)
__getattr__ = exports(__name__, _SOURCES)
