"""The trainer's and SFT's run settings as frozen dataclasses, importable without JAX: the
command lines (`prover_jax.train`, `prover_jax.sft`) read and check them before anything heavy
loads, and the loops (`prover_jax.trainer`, `prover_jax.sft_trainer`) run them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import envs
from prover_jax.config import build
from prover_jax.credit import registry
from prover_jax.credit.hosts import HostOptions
from prover_jax.learner.config import LearnerConfig, OptimizerConfig
from prover_jax.settings import ChatConfig, EvalConfig, SamplingConfig
from tpu.mesh_config import MeshConfig
from tpu.presets import check_preset


@dataclasses.dataclass(frozen=True)
class TinyModel:
    """The random Qwen3, and the byte-level BPE trained on the environment's texts, that a run
    builds when it starts from no model (`tiny`)."""

    vocab_size: int = 512
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    tokenizer_episodes: int = 20  # expert episodes whose texts train the tokenizer
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class AsyncConfig:
    """Bounded-staleness asynchronous updates (`prover_jax.ahead`): update t trains on a batch
    sampled with the params of update ``max(0, t - max_staleness)``, sampled in a thread (on
    every process) while the learner trains on the batches before it. 0 is the synchronous
    loop."""

    max_staleness: int = 0

    def __post_init__(self):
        if self.max_staleness not in (0, 1, 2):
            raise ValueError(f"asynchronous.max_staleness must be 0, 1 or 2, got "
                             f"{self.max_staleness!r}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A training run. ``credit`` is any registered method the trainer can run
    (`trainable_methods`), ``credit_config`` the fields of its config type that differ from
    the defaults (e.g. ``{"lam": 0.5}`` for prover, ``{"base": {"lam": 0.5}}`` for
    prover+vict, ``{"schedule": [[0, 8], [50, 10]]}`` for budget-matched-grpo), and ``host`` the
    settings its host side reads (judge, continuations, ...)."""

    env: str = "household"
    # the environment's keyword arguments (alfworld: {"data": FOLDER} of ALFWorld's games)
    env_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    split: str | None = None  # the tasks trained on (None: "train", else the env's first split)
    credit: str = "grpo"
    credit_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    host: HostOptions = dataclasses.field(default_factory=HostOptions)
    steps: int = 3
    groups: int = 2
    group_size: int = 4
    max_actions: int | None = 6  # cap per episode (None: the environment's turn limit)
    workers: int = 2
    seed: int = 0
    run_dir: str | None = None
    checkpoint_every: int = 10  # steps between checkpoints (the last step is always saved)
    init: str | None = None  # start from a run directory (e.g. an SFT run) or a model folder
    tiny: TinyModel = dataclasses.field(default_factory=TinyModel)  # the model without init
    # The model the config is written for, a `tpu.presets` name (a recipe's): tpu.compile and
    # tpu.launch plan it before any weights are on disk, and `init` must be one.
    architecture: str | None = None
    eval_every: int = 0  # steps between held-out evaluations into metrics.jsonl (0: none)
    eval_at_start: bool = False  # one before the first step too (metrics.jsonl's step -1)
    # steps between measurements of each credit part's share of the policy gradient norm,
    # ``credit/grad_share/<part>`` (one more backward pass per part; 0: none)
    gradient_shares_every: int = 0
    evaluation: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    sampling: SamplingConfig = dataclasses.field(
        default_factory=lambda: SamplingConfig(max_new_tokens=16))
    # How episodes are written in the chat template (None: the init model's stored setting,
    # else ChatConfig's default); the run stores the one it used with its model.
    chat: ChatConfig | None = None
    learner: LearnerConfig = dataclasses.field(default_factory=lambda: LearnerConfig(
        optimizer=OptimizerConfig(learning_rate=1e-3), compute_dtype="float32"))
    # The learner's and sampler's devices (`tpu.mesh`)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    asynchronous: AsyncConfig = dataclasses.field(default_factory=AsyncConfig)

    def __post_init__(self):
        envs.check_name(self.env)
        if self.architecture is not None:
            check_preset(self.architecture)
        method = registry.get(self.credit)
        if not registry.trainable(method):
            raise ValueError(f"credit {self.credit!r} has no host side to produce its inputs "
                             f"{sorted(method.inputs)}; one of {trainable_methods()}")
        self.credit_settings()
        if min(self.steps, self.groups, self.group_size, self.workers,
               self.checkpoint_every) < 1 or min(self.eval_every,
                                                 self.gradient_shares_every) < 0:
            raise ValueError("steps, groups, group_size, workers and checkpoint_every must be "
                             ">= 1, eval_every and gradient_shares_every >= 0")
        check_warmup(self.steps, self.learner)
        s = self.sampling
        if (s.temperature, s.top_k, s.top_p) != (1.0, 0, 1.0):
            raise ValueError("the learner scores tokens under the model's plain softmax, so the "
                             "sampler must draw from it too (temperature 1, top_k 0, top_p 1) "
                             "for its log-probs to be the old policy's; got temperature="
                             f"{s.temperature}, top_k={s.top_k}, top_p={s.top_p}")

    def credit_settings(self):
        """The credit method's config: its config type built from ``credit_config``."""
        return build(registry.get(self.credit).config_type, self.credit_config, "credit_config.")


def trainable_methods() -> list[str]:
    """The registered credit methods the trainer can run (group rollouts, a host side for
    their inputs)."""
    return [name for name in registry.names() if registry.trainable(registry.get(name))]


def check_warmup(steps: int, learner: LearnerConfig) -> None:
    """Raises ValueError when the learning rate's warmup is not shorter than the run."""
    warmup = learner.optimizer.warmup_steps
    if warmup and warmup >= steps:
        raise ValueError(f"learner.optimizer.warmup_steps={warmup} is not shorter than the run "
                         f"(steps={steps}): the learning rate would never reach its peak; set "
                         "learner.optimizer.warmup_steps below steps")


def run_env(config) -> envs.Env:
    """A new environment of a run's config (`TrainConfig`, `SftConfig`): ``env`` made with its
    ``env_options``."""
    return envs.make(config.env, **config.env_options)


@dataclasses.dataclass(frozen=True)
class SftConfig:
    """A warm-start run. ``tiny`` is the model when ``init`` (a run directory or a model
    folder) is None."""

    env: str = "household-small"
    # the environment's keyword arguments (alfworld: {"data": FOLDER} of ALFWorld's games)
    env_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    split: str | None = None  # the demonstrations' tasks (None: "train", else the first split)
    demonstrations: int = 512  # expert episodes trained on
    noise: float = 0.2  # share of the expert's actions replaced by random ones (not trained on)
    repeats: float = 0.0  # share replaced by the previous action again (`DemonstrationPolicy`)
    # the expert actions the loss covers: "all", or "choices": only those at the environment's
    # choice states (`Env.oracle_choice`; household-pivot's choices among look-alikes)
    train_on: str = "all"
    chat: ChatConfig | None = None  # None: the init model's stored setting, else ChatConfig()
    heldout: int = 32  # expert episodes on held-out tasks for the held-out NLL
    steps: int = 300
    batch_size: int = 16
    max_actions: int | None = None  # cap per episode (None: the environment's turn limit)
    workers: int = 2
    seed: int = 0
    run_dir: str | None = None
    checkpoint_every: int = 50
    eval_every: int = 100  # steps between held-out NLL and evaluation (0: only at the end)
    evaluation: EvalConfig = dataclasses.field(
        default_factory=lambda: EvalConfig(samples=0, max_new_tokens=24))
    init: str | None = None
    tiny: TinyModel = dataclasses.field(default_factory=lambda: TinyModel(
        vocab_size=1024, hidden_size=128, layers=4, heads=4, kv_heads=2, head_dim=32,
        intermediate_size=384, tokenizer_episodes=200))
    learner: LearnerConfig = dataclasses.field(default_factory=lambda: LearnerConfig(
        optimizer=OptimizerConfig(learning_rate=1e-3, warmup_steps=20), compute_dtype="float32"))
    # The learner's devices (`tpu.mesh`)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)

    def __post_init__(self):
        envs.check_name(self.env)
        if min(self.demonstrations, self.heldout, self.steps, self.batch_size, self.workers,
               self.checkpoint_every) < 1 or self.eval_every < 0:
            raise ValueError("demonstrations, heldout, steps, batch_size, workers and "
                             "checkpoint_every must be >= 1, eval_every >= 0")
        if self.train_on not in ("all", "choices"):
            raise ValueError(f"train_on must be 'all' or 'choices', got {self.train_on!r}")
        for name in ("noise", "repeats"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        check_warmup(self.steps, self.learner)


def demonstrating_env(config: SftConfig) -> envs.Env:
    """A new environment of ``config`` (`run_env`); ValueError when it has no expert to learn
    from, or no choice oracle for ``train_on: choices``."""
    env = run_env(config)
    if not env.has_expert:
        raise ValueError(f"{config.env} has no expert to learn from")
    if config.train_on == "choices" and "choice" not in env.oracles:
        raise ValueError(f"train_on 'choices' needs an environment with a choice oracle; "
                         f"{config.env} has none")
    return env
