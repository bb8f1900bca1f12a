"""The training loop: roll out groups with the model, assign credit, update, checkpoint.

One step: ``groups`` tasks, ``group_size`` episodes each, sampled by :class:`ModelPolicy` over an
environment pool; the chosen credit method's host side (ProVer's judge and verification, VICT's
trace and cores) and its jitted kernel; the episodes' token streams, exactly as sampled, packed
into a padded batch with the sampler's log-probs as the old policy's; one learner step; the
step's metrics appended to the run directory's ``metrics.jsonl``, and every
``checkpoint_every`` steps a checkpoint. A killed run resumes from its last checkpoint exactly:
the checkpointed state's data position says which tasks come next, and its key every random
draw of the host side (rollouts, judges, continuations). Each group draws from its own streams
(`group_rng`), so a group plays, is judged and is continued the same in any batch and on any
process: with several processes the rollouts, and so the updates, are the single process's.

``python -m prover_jax.train`` is its command line, and `prover_jax.run_settings.TrainConfig`
its settings; the loop never imports its command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from tensorboardX import SummaryWriter

import envs
from envs.pool import EnvPool
from models import qwen
from models.qwen.chat import CHATML_TEMPLATE, AgentFormat
from prover_jax import ahead, credit, runs
from prover_jax.batch import Batch, pack_streams
from prover_jax.choice_probe import held_out_probes, probe_metrics
from prover_jax.credit.hosts import HostContext, HostOptions, HostOutput
from prover_jax.evaluation import evaluate_model
from prover_jax.interrupt import Interrupted, deferred_signals
from prover_jax.learner import Checkpoints, Learner, TrainBatch
from prover_jax.model_policy import ModelPolicy
from prover_jax.plot import plot_run
from prover_jax.rollout import Episode, rng_streams, run, start
from prover_jax.run_files import (
    CHANGES_FILE,
    CHECKPOINTS,
    METRICS,
    check_run_config,
    check_run_tasks,
    most_credited,
    record_config_changes,
    write_run_config,
    write_run_tasks,
)
from prover_jax.run_settings import TinyModel, TrainConfig, run_env
from prover_jax.settings import eval_split
from prover_jax.spo_rollouts import (
    SpoTree,
    default_branch_actions,
    spo_trees,
)
from tpu import distributed
from tpu.mesh import batch_shards, build_mesh, from_process_local, to_sampler

TENSORBOARD = "tensorboard"
UPDATE_PHASES = ("rollout", "credit", "learner")  # an update's work, logged as time/<phase>_s


# Qwen's added tokens for the template's tags: one token each instead of a dozen bytes.
TEMPLATE_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                 "<tools>", "</tools>", "<think>", "</think>")


def tiny_tokenizer(texts: Sequence[str], vocab_size: int = 512):
    """A byte-level BPE trained on ``texts`` with ChatML special tokens, Qwen's template tags
    as added tokens, and the ChatML template."""
    import tokenizers
    import transformers

    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(list(texts), trainer)
    bpe.add_tokens(list(TEMPLATE_TAGS))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE)


def tiny_model(vocab_size: int, seed: int = 0, shape: TinyModel = TinyModel()):
    """A Qwen3 of `shape` with random weights: (config, float32 params)."""
    cfg = qwen.QwenConfig(model_type="qwen3", vocab_size=vocab_size, hidden_size=shape.hidden_size,
                          intermediate_size=shape.intermediate_size, num_layers=shape.layers,
                          num_heads=shape.heads, num_kv_heads=shape.kv_heads,
                          head_dim=shape.head_dim, qk_norm=True)
    params = qwen.init_numpy(cfg, seed)
    return cfg, params


def tiny(env: envs.Env, shape: TinyModel, split: str | None = None):
    """``(cfg, params, tokenizer)``: `shape`'s model and a tokenizer trained on `env`'s
    texts."""
    texts = environment_texts(env, shape.tokenizer_episodes, shape.seed, split)
    tokenizer = tiny_tokenizer(texts, shape.vocab_size)
    cfg, params = tiny_model(len(tokenizer), shape.seed, shape)
    return cfg, params, tokenizer


def initial_model(config) -> tuple:
    """``(cfg, params, tokenizer)`` a run (`TrainConfig`, `SftConfig`) starts from: its
    ``init`` (a run directory's newest checkpoint or a Hugging Face model folder,
    `prover_jax.runs.load`), else its ``tiny`` model with a tokenizer trained on the texts of
    its environment's ``split``.

    Raises:
      ValueError: an unknown environment or split. FileNotFoundError: a missing ``init``.
    """
    env = run_env(config)
    split = task_split(env, config.split)
    if config.init is not None:
        return runs.load(config.init)
    return tiny(env, config.tiny, split)


def task_split(env: envs.Env, split: str | None) -> str:
    """`split`, checked against the environment's splits; None picks "train" when the
    environment has it, else its first split (tau airline has only "test")."""
    if split is None:
        return "train" if "train" in env.splits else env.splits[0]
    if split not in env.splits:
        raise ValueError(f"{env.name} has no split {split!r}; its splits: {env.splits}")
    return split


def environment_texts(env: envs.Env, episodes: int = 20, seed: int = 0,
                      split: str | None = None) -> list[str]:
    """Observations and actions of expert episodes (random ones where the environment has no
    expert; only the first observations where it has neither): a corpus for a tokenizer."""
    rng, texts = random.Random(seed), [env.instruction()]
    for task in env.tasks(task_split(env, split))[:episodes]:
        texts.append(env.reset(task))
        for _ in range(env.max_turns):
            action = corpus_action(env, rng)
            if action is None:
                break
            step = env.step(action)
            texts += [action, step.obs]
            if step.done:
                break
    return texts


def corpus_action(env: envs.Env, rng: random.Random) -> str | None:
    """The expert's next action, or (3 times in 10) a random one; the other kind when the
    environment lacks one; None when it has neither."""
    chosen = (env.expert_action, lambda: env.random_action(rng))
    for choose in chosen if rng.random() < 0.7 else chosen[::-1]:
        try:
            return choose()
        except NotImplementedError:
            continue
    return None


def to_batch(groups: list[list[Episode]], pad_token_id: int, max_len: int,
             row_multiple: int = 1, **pack_kwargs):
    """The groups' token streams packed: (Batch, the sampler's log-probs [B, L])."""
    return pack_streams([[e.stream() for e in group] for group in groups],
                        [[e.reward for e in group] for group in groups],
                        pad_token_id=pad_token_id, max_len=max_len, row_multiple=row_multiple,
                        **pack_kwargs)


def horizon(config: TrainConfig, env: envs.Env) -> int:
    """The most actions an episode of the run takes: T of every process's batch with several
    processes, whose host sides run before the processes agree on shapes."""
    return min(config.max_actions or env.max_turns, env.max_turns)


def agreed_batch(groups: list[list[Episode]], batch: Batch, old: np.ndarray,
                 pad_token_id: int, max_len: int, row_multiple: int):
    """(batch, old) of this process's `groups` padded to the longest L of any process (the
    learner's global batch stacks every process's rows; their T is already the same)."""
    mine = batch.tokens.shape[1]
    agreed = max(distributed.gather_objects(mine))
    if agreed == mine:
        return batch, old
    return to_batch(groups, pad_token_id, max_len, row_multiple, min_len=agreed,
                    min_turns=batch.turn_valid.shape[1])


def process_groups(config: TrainConfig) -> range:
    """The positions of the step's groups this process rolls out (all, with one process): a
    group never spans processes, so its statistics stay local.

    Raises:
      ValueError: the groups do not split evenly over the processes.
    """
    processes, me = jax.process_count(), jax.process_index()
    if config.groups % processes:
        raise ValueError(f"groups: {config.groups} groups do not split over {processes} "
                         "processes")
    share = config.groups // processes
    return range(me * share, (me + 1) * share)


def process_row_multiple(config, mesh) -> int:
    """What this process's rows are padded to a multiple of: its share of micro-batches x
    batch shards.

    Raises:
      ValueError: the batch shards do not split over the processes.
    """
    rows, processes = config.learner.micro_batches * batch_shards(mesh), jax.process_count()
    if rows % processes:
        raise ValueError(f"mesh: {batch_shards(mesh)} batch shards x {config.learner.micro_batches}"
                         f" micro-batches do not split over {processes} processes")
    return rows // processes


def train(config: TrainConfig, cfg, params, tokenizer, log=tqdm.tqdm.write) -> list[dict]:
    """Runs ``config.steps`` steps in the run directory ``config.run_dir`` (resuming from its
    last checkpoint); returns the metrics of the steps it ran.

    The run directory holds ``config.json`` (the resolved config), ``metrics.jsonl`` (one line
    per step, the same scalars as TensorBoard events in ``tensorboard/``), the host side's
    records (``prover_proposals.jsonl``, ``vict_proofs.jsonl``: one line per item, with its
    step), ``checkpoints/`` and ``plots/`` (drawn at the end, `prover_jax.plot`). Without one,
    a temporary directory is used and removed at the end.

    Raises:
      ValueError: an unknown environment or split; VICT credit on an environment without a
        verifier; a positive control on one without its oracle; a run directory holding
        another config (anything but ``steps`` differs) or another model's checkpoints
        (nothing in it is changed).
    """
    env = run_env(config)
    tasks = env.tasks(task_split(env, config.split))
    check_verifier(env, tasks[0], config.credit)
    config = with_chat(config, tokenizer, env.instruction(), log)
    with (run_or_temporary(config.run_dir, "run-", log) as directory,
          local_judge(config.host, log) as host_options):
        return _train(config, host_options, env, tasks, cfg, params, tokenizer, directory, log)


def with_chat(config, tokenizer, system: str, log):
    """`config` (`TrainConfig`, `SftConfig`) with its chat setting resolved (`runs.chat_for`:
    as set, else the init model's, else the default) and checked against the tokenizer's
    template (`AgentFormat`).

    Raises:
      ValueError: a template argument the template does not read, or a reply format it cannot
        write.
    """
    stored = runs.stored_chat(config.init) if config.init is not None else None
    chat, warning = runs.chat_for(config.chat, stored, config.init)
    if warning:
        log(warning)
    AgentFormat(tokenizer, system, chat.reply, chat.template)
    return dataclasses.replace(config, chat=chat)


def reference_policy(learner: Learner, params):
    """The KL term's reference: the run's starting `params` (host arrays, or global arrays
    restored from a run) cast to the learner's compute dtype on the devices, placed as the
    learner places its own (a resumed run keeps the same reference)."""
    dtype = jnp.dtype(learner.cfg.compute_dtype)
    cast = jax.jit(lambda tree: jax.tree.map(lambda p: p.astype(dtype), tree),
                   out_shardings=learner.state_shardings.params)
    return cast(params)


def check_verifier(env: envs.Env, task: envs.Task, credit_name: str) -> None:
    """Raises ValueError when ``credit_name`` uses VICT and ``env`` has no verifier."""
    if "vict" not in credit_name.split("+"):
        return
    try:
        env.verifier(task)
    except NotImplementedError as e:
        raise ValueError(f"credit {credit_name!r} needs the environment's VICT verifier: {e}"
                         ) from None


def check_oracles(env: envs.Env, credit_name: str, options: HostOptions,
                  probe: bool = False) -> None:
    """Raises ValueError when ``credit_name`` (or ProVer's judge in ``options``, or the choice
    probe when ``probe``) reads an oracle that ``env`` lacks: the dense oracle credit, the
    oracle judge, the probe's states."""
    if probe and "choice" not in env.oracles:
        raise ValueError(f"evaluation.probe_tasks needs an environment with a choice oracle "
                         f"(household-pivot); {env.name} has none")
    parts = credit_name.split("+")
    if "oracle-progress" in parts and "progress" not in env.oracles:
        raise ValueError(f"credit {credit_name!r} needs an environment with a progress oracle "
                         f"(household-pivot); {env.name} has none")
    if "prover" in parts:
        from prover_jax import judges

        judges.make(options.judge, **options.judge_config).check_env(env)


@contextlib.contextmanager
def local_judge(options: HostOptions, log) -> Iterator[HostOptions]:
    """`options`, with the judge and critic pointed at ``options.judge_model`` served on
    loopback for as long as the context is open (unchanged without a judge model). The
    endpoint is not part of the run's config, so a resumed run serves it afresh."""
    if options.judge_model is None:
        yield options
        return
    from prover_jax.server import serve
    from prover_jax.server.model import ModelBackend

    backend = ModelBackend(options.judge_model)
    try:
        with serve(backend) as base_url:
            log(f"judge model {options.judge_model} served at {base_url}")
            yield options.served_at(base_url, backend.name)
    finally:
        backend.close()


@contextlib.contextmanager
def run_or_temporary(run_dir: str | None, prefix: str, log) -> Iterator[Path]:
    """`run_dir`, or a temporary directory that is announced and removed at the end."""
    if run_dir is not None:
        yield Path(run_dir)
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as directory:
        log(f"the run writes to {directory}, removed at the end (pass a run directory to "
            "keep it)")
        yield Path(directory)


def keep_steps_before(path: Path, steps_done: int) -> None:
    """Drops a JSONL file's lines of steps after the last checkpoint (a resumed run redoes
    them)."""
    lines = [line for line in path.read_text().splitlines()
             if line.strip() and json.loads(line)["step"] < steps_done]
    path.write_text("".join(line + "\n" for line in lines))


def step_metrics(groups: Sequence[Sequence[Episode]], learner_metrics: dict, host_logs: dict,
                 seconds: dict) -> dict:
    """One step's metrics under their stable names, from its episodes grouped by task."""
    episodes = [e for group in groups for e in group]
    return {
        "reward/mean": float(np.mean([e.reward for e in episodes])),
        "success/rate": float(np.mean([e.reward >= 1.0 for e in episodes])),
        "success/mixed_groups": mixed_groups(groups),
        "episode/count": float(len(episodes)),
        "episode/actions": float(np.mean([e.num_turns for e in episodes])),
        "episode/valid_actions": float(np.mean([v for e in episodes for v in e.valid] or [0.0])),
        "episode/overflow": float(np.mean([e.overflow for e in episodes])),
        **{f"learner/{k}": float(v) for k, v in learner_metrics.items()},
        **{f"credit/{k}": float(v) for k, v in host_logs.items()},
        **{f"time/{k}_s": v for k, v in seconds.items()},
    }


def advantage_mass(parts: Mapping[str, Any], batch: Batch) -> dict[str, float]:
    """Each credit part's share of the batch's advantage mass, ``credit/mass/<part>``: the sum
    of its absolute per-turn advantage over every policy token it applies to, over the same sum
    for all parts (0 for every part when all are 0).

    Args:
      parts: float [B, T] per-turn advantages by source (`credit.parts`).
      batch: the step's padded batch (its ``turn_ids`` and ``loss_mask`` [B, L]).
    """
    turns = next(iter(parts.values())).shape[1]
    turn_ids = np.asarray(jax.device_get(batch.turn_ids))
    on_policy = np.asarray(jax.device_get(batch.loss_mask)) & (turn_ids >= 0)
    rows = np.nonzero(on_policy)[0]
    tokens = np.zeros((turn_ids.shape[0], turns))
    np.add.at(tokens, (rows, turn_ids[on_policy]), 1.0)
    mass = {name: float(np.sum(np.abs(np.asarray(jax.device_get(value))) * tokens))
            for name, value in parts.items()}
    total = sum(mass.values())
    return {f"credit/mass/{name}": value / total if total else 0.0
            for name, value in mass.items()}


def gradient_shares(learner: Learner, params, train_batch: TrainBatch,
                    parts: Mapping[str, Any], batch: Batch) -> dict[str, float]:
    """Each credit part's share of the policy gradient norm, ``credit/grad_share/<part>``:
    the norm of the gradient its advantages give (`Learner.part_gradient_norms`) over the
    sum of every part's (0 for every part when all are 0).

    Args:
      learner, params: the learner and its params before the update.
      train_batch: the update's TrainBatch, global over the processes.
      parts: float [B, T] this process's per-turn advantages by source (`credit.parts`).
      batch: this process's rows of the padded batch (``turn_ids``, ``loss_mask`` [B, L]).
    """
    tokens = np.stack([np.asarray(credit.to_tokens(value, batch.turn_ids, batch.loss_mask))
                       for value in parts.values()], axis=1)
    norms = np.asarray(jax.device_get(learner.part_gradient_norms(
        params, train_batch, from_process_local(learner.mesh, tokens))))
    total = float(norms.sum())
    return {f"credit/grad_share/{name}": float(norm) / total if total else 0.0
            for name, norm in zip(parts, norms)}


def mixed_groups(groups: Sequence[Sequence[Episode]]) -> float:
    """The share of `groups` holding both a success (reward >= 1) and a failure: those whose
    outcomes differ, so that a group-relative advantage is not zero."""
    return float(np.mean([len({e.reward >= 1.0 for e in group}) == 2 for group in groups]))


def rollout_settings(settings: Any) -> Any:
    """The config holding a credit method's rollout knobs (group-size schedule, tree shape):
    the method's own, or for a composition (`NAME+vict`) NAME's."""
    while hasattr(settings, "base"):
        settings = settings.base
    return settings


def group_rows(config: TrainConfig, step: int | None = None) -> int:
    """Episodes per task group at `step` (None: the most of any step), by the credit method's
    kind of rollouts: the configured group size, budget-matched GRPO's schedule, or a tree's
    leaves."""
    rollouts = credit.get(config.credit).rollouts
    knobs = rollout_settings(config.credit_settings())
    if rollouts == "trees":
        return knobs.width ** knobs.depth
    if rollouts == "scheduled-groups":
        return (max(size for _, size in knobs.schedule) if step is None
                else knobs.group_size(step))
    return config.group_size


def roll_out(config: TrainConfig, pool: EnvPool, policy: ModelPolicy, tasks: Sequence,
             rngs: Sequence[random.Random], step: int
             ) -> tuple[list[list[Episode]], list[SpoTree] | None]:
    """One step's finished episodes per task, in packing order, and for a tree method the
    trees whose leaves they are; ``rngs[g]`` is task g's group's own random stream."""
    if credit.get(config.credit).rollouts == "trees":
        knobs = rollout_settings(config.credit_settings())
        branch = knobs.branch_actions or default_branch_actions(config.env)
        trees = spo_trees(pool, policy, tasks, rngs, branch, knobs.depth, knobs.width,
                          config.max_actions)
        return [list(tree.episodes) for tree in trees], trees
    size = group_rows(config, step)
    episodes = run(pool, policy, [start(t) for t in tasks for _ in range(size)],
                   [stream for rng in rngs for stream in rng_streams(rng, size)],
                   config.max_actions, progress="rollout")
    return [episodes[g * size:(g + 1) * size] for g in range(len(tasks))], None


@dataclasses.dataclass
class Sampled:
    """One update's rollout and its credit method's host side, before credit (host arrays: it
    is saved with a checkpoint while in flight, `prover_jax.ahead`). Collective-free: an
    asynchronous run makes it in a thread of its own on every process."""

    step: int
    version: int  # the updates the params it was sampled with had made
    next_key: np.ndarray  # uint32 [2]: the key data of the next step's draws
    position: int  # the data position of its first task
    groups: list[list[Episode]]
    pad_id: int  # what its batch is padded with
    batch: Batch  # this process's rows; with several processes, T is the run's `horizon`
    old: np.ndarray  # float32 [B, L] the sampler's log-probs
    output: HostOutput
    seconds: dict[str, float]  # of its rollout and host side


@dataclasses.dataclass
class Produced(Sampled):
    """`Sampled` with L agreed over the processes, and its credit."""

    advantages: np.ndarray  # float32 [B, L]
    dropped: np.ndarray | None  # bool [B, L] tokens left out of the loss
    parts: dict[str, np.ndarray]  # float32 [B, T] per source (`credit.parts`)


def sample(config: TrainConfig, env: envs.Env, pool: EnvPool, host, tasks, cfg, tokenizer,
           mine: range, row_multiple: int, step: int, key_data: np.ndarray, position: int,
           sampler_params, version: int) -> Sampled:
    """The rollout of update `step`: its tasks from the data `position`, its groups rolled out
    with `sampler_params` (`to_sampler` of the params after `version` updates), and the
    host side; its random draws from the step's key data."""
    laps = Laps()
    seed, next_key = step_seed(key_data)
    chosen = [task_at(tasks, position + g, config.seed) for g in mine]
    policy = ModelPolicy(sampler_params, cfg, tokenizer, env.instruction(), config.sampling,
                         config.chat)
    groups, trees = roll_out(config, pool, policy, chosen,
                             [group_rng(seed, g, "rollout") for g in mine], step)
    min_turns = horizon(config, env) if jax.process_count() > 1 else 1
    pad_id = policy.pad_id
    batch, old = to_batch(groups, pad_id, cfg.max_position_embeddings, row_multiple,
                          min_turns=min_turns)
    laps.lap("rollout")
    rows, turns = batch.turn_valid.shape
    output = (HostOutput({}, {}, {}) if host is None else
              host(HostContext(env, groups, pool, policy,
                               [group_rng(seed, g, "host") for g in mine], rows, turns, trees)))
    del policy  # its sampling copy of the weights
    laps.lap("credit")
    return Sampled(step, version, np.asarray(jax.device_get(next_key)), position, groups,
                   pad_id, batch, old, jax.device_get(output), laps.seconds)


def with_credit(config: TrainConfig, sampled: Sampled, max_len: int, row_multiple: int
                ) -> Produced:
    """`sampled` padded to the L every process agrees on, and its credit (collectives: the
    learner's thread makes it, on every process in the same order)."""
    method, settings = credit.get(config.credit), config.credit_settings()
    batch, old = agreed_batch(sampled.groups, sampled.batch, sampled.old, sampled.pad_id,
                              max_len, row_multiple)
    inputs = sampled.output.inputs
    credited = credit.compute(config.credit, batch, inputs, settings)
    dropped = (None if method.dropped_tokens is None else
               method.dropped_tokens(batch, inputs, settings, old))
    parts = credit.parts(config.credit, batch, inputs, settings, credited)
    return Produced(**{**vars(sampled), "batch": batch, "old": old},
                    advantages=np.asarray(jax.device_get(credited.tokens)),
                    dropped=None if dropped is None else np.asarray(jax.device_get(dropped)),
                    parts=jax.device_get(parts))


def _train(config: TrainConfig, host_options: HostOptions, env: envs.Env, tasks, cfg, params,
           tokenizer, directory: Path, log) -> list[dict]:
    method = credit.get(config.credit)
    check_oracles(env, config.credit, host_options, config.evaluation.probe_tasks > 0)
    host = None if method.host is None else method.host(host_options, config.credit_settings())
    learner = Learner(cfg, config.learner, build_mesh(config.mesh))
    mine, row_multiple = process_groups(config), process_row_multiple(config, learner.mesh)
    run_dir = RunDirectory(directory, config, env.task_source(), learner, cfg, params, tokenizer,
                           log, config.credit)
    state = run_dir.state
    reference = reference_policy(learner, params) if config.learner.loss.kl_coef else None
    staleness = config.asynchronous.max_staleness
    with (EnvPool(config.env, len(mine) * group_rows(config), config.workers,
                  config=dict(config.env_options)) as pool,
          deferred_signals() as received):
        if config.eval_at_start and not run_dir.started():
            run_dir.write_before_training(
                evaluated(config, pool, state.params, learner, cfg, tokenizer, env))
        pool_in_use = threading.Lock()  # the producer's rollouts, the learner's evaluations
        first = int(state.step)
        chain = {"step": first, "key": state.rng, "position": int(state.data_position)}

        def sampled(step: int, sampler_params, version: int) -> Sampled:
            assert step == chain["step"]  # batches are sampled in order
            with pool_in_use:
                batch = sample(config, env, pool, host, tasks, cfg, tokenizer, mine,
                               row_multiple, step, chain["key"], chain["position"],
                               sampler_params, version)
            chain.update(step=step + 1, key=batch.next_key,
                         position=batch.position + config.groups)
            return batch

        pending = (run_dir.load_pending(first) if staleness and 0 < first < config.steps
                   else {})
        if pending:  # the thread goes on after the batches produced before the checkpoint
            last = pending[max(pending)]
            chain.update(step=last.step + 1, key=last.next_key,
                         position=last.position + config.groups)
        source = (ahead.Inline(sampled) if not staleness else
                  ahead.Ahead(sampled, staleness, first, config.steps, pending))

        def offer(state) -> None:
            sampler = to_sampler(state.params, cfg, learner.mesh, config.sampling.dtype)
            if staleness:  # the learner's next step donates the params the copy may share
                sampler = jax.tree.map(jnp.copy, sampler)
            source.offer(int(state.step), sampler)

        try:
            if staleness:
                offer(state)
            while int(state.step) < config.steps:
                step = int(state.step)
                if not staleness:  # its params, right before its rollout
                    offer(state)
                laps = Laps()
                sampled_batch = source.take(step)
                laps.lap("wait")
                batch = with_credit(config, sampled_batch, cfg.max_position_embeddings,
                                    row_multiple)
                laps.lap("credit")
                train_batch = from_process_local(learner.mesh, TrainBatch(
                    batch.batch, batch.advantages, batch.old, dropped=batch.dropped))
                shares = {}
                if (config.gradient_shares_every and len(batch.parts) > 1
                        and (step + 1) % config.gradient_shares_every == 0):
                    shares = gradient_shares(learner, state.params, train_batch, batch.parts,
                                             batch.batch)
                    laps.lap("grad_shares")
                if reference is not None:
                    train_batch = dataclasses.replace(train_batch, ref_logprobs=learner.logprobs(
                        reference, train_batch.batch.tokens))
                state, metrics = learner.train_step(state, train_batch)
                state = dataclasses.replace(
                    state, rng=jax.device_put(batch.next_key, state.rng.sharding),
                    data_position=jax.device_put(np.int32(batch.position + config.groups),
                                                 state.data_position.sharding))
                metrics = jax.device_get(metrics)
                laps.lap("learner")
                if staleness and int(state.step) < config.steps:
                    offer(state)
                if run_dir.checkpoint(state, config.checkpoint_every) and staleness:
                    run_dir.save_pending(int(state.step), source.pending(int(state.step)))
                laps.lap("checkpoint")
                evaluation = {}
                if config.eval_every and (step + 1) % config.eval_every == 0:
                    with pool_in_use:
                        evaluation = evaluated(config, pool, state.params, learner, cfg,
                                               tokenizer, env)
                    laps.lap("eval")
                seconds = {name: batch.seconds.get(name, 0.0) + laps.seconds.get(name, 0.0)
                           for name in {**batch.seconds, **laps.seconds}}
                if not staleness:  # the rollout and credit are the step's own time
                    del seconds["wait"]
                row, records = step_record(batch, metrics, seconds, {**shares, **evaluation},
                                           mine, staleness > 0)
                run_dir.write(row, records, reward=f"{row['reward/mean']:.3f}",
                              step_s=f"{sum(seconds.values()):.1f}")
                run_dir.stop_if_signalled(
                    state, received(), config.run_dir,
                    functools.partial(source.pending, step + 1) if staleness else None)
        finally:
            source.close()
    return run_dir.close()


def step_record(batch: Produced, metrics: Mapping[str, Any], seconds: Mapping[str, float],
                evaluation: Mapping[str, float], mine: range, asynchronous: bool
                ) -> tuple[dict, dict[str, list[dict]]]:
    """One update's metrics row (`metrics.jsonl`; over every process) and records (the host
    side's and the sampled group's, `sample_records`), from its batch, the learner's
    metrics, the phases' seconds and what was measured besides (`evaluation`: the
    evaluation after it, the gradient shares)."""
    row = distributed.mean_over_processes({
        **step_metrics(batch.groups, metrics, batch.output.diagnostics, seconds),
        **advantage_mass(batch.parts, batch.batch), **evaluation,
        **({"async/staleness": float(batch.step - batch.version)} if asynchronous else {})})
    records = merged_records({**batch.output.records,
                              "samples": sample_records(batch.groups, batch.parts, mine)})
    episodes = sum(len(group) for group in batch.groups)
    return ({"step": batch.step, **row, "episode/count": float(episodes * jax.process_count())},
            records)


class RunDirectory:
    """A run directory opened for training (the trainer's or `prover_jax.sft`'s).

    Opening it checks the config against the one it was started with and writes it, saves the
    model's config and tokenizer (`prover_jax.runs`), restores the newest checkpoint (`state`:
    that, or a fresh one from `params`) and drops the JSONL lines of steps after it. Then
    `checkpoint` and `write` once per step, and `close` at the end (plots).

    With several processes every one checkpoints (orbax writes each process's shards; the
    directory must be shared storage) and only process 0 writes the rest.
    """

    def __init__(self, directory: Path, config, tasks: Mapping[str, Any], learner: Learner, cfg,
                 params, tokenizer, log, desc: str):
        check_run_config(directory, config)
        check_run_tasks(directory, tasks)
        log(f"tasks of {envs.source_line(tasks)}")
        self.checkpoints = Checkpoints(directory / CHECKPOINTS, keep=2)
        restored = self.checkpoints.restore(learner.abstract_state())
        self.main = distributed.is_main()
        changed = record_config_changes(directory, config, int(restored.step)) if (
            self.main and restored is not None) else None
        if self.main:
            write_run_config(directory, config)
            write_run_tasks(directory, tasks)
            runs.save_model(directory, cfg, tokenizer, config.chat)
        self.state = restored or learner.init(params, rng=config.seed)
        done, self.steps = int(self.state.step), config.steps
        if restored is not None and done >= config.steps:
            log(f"nothing to do: {directory} holds step {done} of {config.steps}")
        elif restored is not None:
            log(f"resumed from {directory}: {done} of {config.steps} steps done")
        if changed:
            log(f"settings changed on resuming (recorded in {CHANGES_FILE}): {changed}")
        if done < config.steps:
            log(f"step {done + 1}/{config.steps}: compiling the programs first (a minute or more "
                "on a CPU; cached for the next run)")
        for path in directory.glob("*.jsonl") if self.main else ():
            keep_steps_before(path, done)
        self.directory, self.log, self.history = directory, log, []
        self.board = (SummaryWriter(str(directory / TENSORBOARD), purge_step=done)
                      if self.main else None)
        self.progress = tqdm.tqdm(total=config.steps, initial=done, unit="step",
                                  disable=None if self.main else True,
                                  desc=desc)  # drawn only on a terminal

    def checkpoint(self, state, every: int) -> bool:
        """Saves `state` every `every` steps and after the last; whether it did."""
        step = int(state.step)
        due = step % every == 0 or step == self.steps
        if due:
            self.checkpoints.save(state)
        return due

    def save_pending(self, step: int, batches: dict) -> None:
        """This process's batches sampled ahead for updates the checkpoint after `step`
        updates has not made (`prover_jax.ahead`; none after the last), saved beside it."""
        ahead.save_pending(self.directory, step, batches, set(self.checkpoints.steps()),
                           jax.process_index())

    def load_pending(self, step: int) -> dict:
        """This process's batches saved with the checkpoint after `step` updates
        (`save_pending`)."""
        return ahead.load_pending(self.directory, step, jax.process_index())

    def stop_if_signalled(self, state, signum: int | None, run_dir: str | None,
                          pending: Callable[[], dict] | None = None) -> None:
        """After a step: when this or any other process got SIGINT or SIGTERM (`signum`),
        saves `state`, with an asynchronous run's batches produced ahead for later updates
        (`pending()`), closes the directory and raises `Interrupted` (every process at the
        same step)."""
        signals = [s for s in distributed.gather_objects(signum) if s]
        if signals:
            step = int(state.step)
            if step not in self.checkpoints.steps():  # a due one may hold it
                self.checkpoints.save(state)
                if pending is not None:
                    self.save_pending(step, pending())
            self.close()
            raise Interrupted(signals[0], step, run_dir)

    def write(self, row: dict, records: Mapping[str, list[dict]] | None = None,
              **postfix: str) -> None:
        """One step's metrics (`metrics.jsonl`, TensorBoard, a log line, the progress bar's
        `postfix`) and the host side's records (``NAME.jsonl``, with the step); process 0
        only."""
        self.history.append(row)
        if not self.main:
            return
        step = row["step"]
        append_lines(self.directory / f"{METRICS}.jsonl", [row])
        for name, lines in (records or {}).items():  # e.g. prover_proposals.jsonl
            append_lines(self.directory / f"{name}.jsonl", [{"step": step, **r} for r in lines])
        for key, value in row.items():
            if key != "step":
                self.board.add_scalar(key, value, step)
        self.board.flush()
        self.progress.update()
        self.progress.set_postfix(**postfix)
        self.log(step_line(row, self.steps))

    def started(self) -> bool:
        """Whether the run has taken a step or evaluated before its first
        (`write_before_training`): process 0's answer, which writes the metrics, on every
        process (they then evaluate or not together)."""
        path = self.directory / f"{METRICS}.jsonl"
        here = int(self.state.step) > 0 or (path.exists() and bool(path.read_text().strip()))
        return distributed.gather_objects(here)[0]

    def write_before_training(self, evaluation: dict[str, float]) -> None:
        """The held-out evaluation of the initial model as metrics.jsonl's step -1, with a log
        line; process 0 only."""
        if not self.main:
            return
        append_lines(self.directory / f"{METRICS}.jsonl", [{"step": -1, **evaluation}])
        self.log("before the first step: " + ", ".join(
            f"held-out {mode} success {evaluation[f'eval/{mode}/success']:.3f}"
            for mode in ("greedy", "sampled") if f"eval/{mode}/success" in evaluation))

    def close(self) -> list[dict]:
        """Closes it, draws the plots if steps ran; the metrics of the steps that ran."""
        self.progress.close()
        self.checkpoints.close()
        if self.main:
            self.board.close()
            if self.history:
                plot_run(self.directory)
        return self.history


def evaluated(config: TrainConfig, pool: EnvPool, params, learner: Learner, cfg, tokenizer,
              env: envs.Env) -> dict[str, float]:
    """`held_out` of the learner's `params`, on process 0 with its own sampling copy of them,
    and the choice probe (``eval/probe/...``) where `config.evaluation` asks for it; nothing on
    the other processes."""
    settings = config.evaluation
    probe = {}
    if settings.probe_tasks:  # on every process: the learner's log-probs span its mesh
        tasks = env.tasks(eval_split(env, settings.split))[: settings.probe_tasks]
        probes, pad = held_out_probes(pool, env, tokenizer, config.chat, tasks)
        probe = {f"eval/probe/{k}": v for k, v in probe_metrics(
            lambda tokens: learner.logprobs(params, tokens), probes, pad,
            cfg.max_position_embeddings).items()}
    if not (settings.greedy or settings.samples):
        return probe if distributed.is_main() else {}
    # on every process: the sampling copy is gathered from the learner's mesh
    sampler = to_sampler(params, cfg, learner.mesh, config.sampling.dtype)
    if not distributed.is_main():
        return {}
    return {**probe, **held_out(config, pool, sampler, cfg, tokenizer, env)}


def held_out(config: TrainConfig, pool: EnvPool, params, cfg, tokenizer, env: envs.Env
             ) -> dict[str, float]:
    """``eval/<mode>/<metric>`` of `params` on the held-out tasks (`config.evaluation`, with
    the run's reply length, action cap and decode chunk where it sets none)."""
    settings = config.evaluation
    settings = dataclasses.replace(
        settings, max_new_tokens=settings.max_new_tokens or config.sampling.max_new_tokens,
        max_actions=settings.max_actions or config.max_actions,
        decode_chunk=(config.sampling.decode_chunk if settings.decode_chunk is None
                      else settings.decode_chunk))
    tasks = env.tasks(eval_split(env, settings.split))[: settings.tasks]
    results = evaluate_model(pool, params, cfg, tokenizer, settings, tasks, config.chat)
    return {f"eval/{mode}/{k}": v for mode, metrics in results.items() for k, v in metrics.items()}


def append_lines(path: Path, records: Sequence[dict]) -> None:
    """Appends one JSON line per record to `path` and flushes it."""
    with path.open("a") as out:
        out.writelines(json.dumps(record) + "\n" for record in records)


def step_seed(key_data: jax.Array) -> tuple[int, jax.Array]:
    """One step's seed of all host randomness (the same on every process), drawn from the
    checkpointed key data uint32 [2], and the key data the next step draws from."""
    key, step_key = jax.random.split(jax.random.wrap_key_data(key_data))
    seed = int.from_bytes(np.asarray(jax.random.key_data(step_key)).tobytes(), "little")
    return seed, jax.random.key_data(key)


def group_rng(seed: int, group: int, use: str) -> random.Random:
    """The random stream of the step's group `group` (its position in the step) for `use`
    ("rollout": its episodes; "host": its judge and continuations): the same whichever process
    holds the group."""
    return random.Random(f"{seed}/{use}/{group}")


# A step's key figures in its log line (metrics.jsonl name -> label); the rest are in the file.
KEY_FIGURES = {
    "learner/loss": "loss", "learner/is_truncated": "IS truncated",
    "async/staleness": "staleness",
    "sft/nll": "nll", "sft/heldout_nll": "held-out nll",
    "credit/prover/eligible_groups": "eligible groups", "credit/prover/valid_proposals":
    "verified", "credit/prover/accepted": "accepted", "credit/prover/mean_delta": "mean Δ",
    "credit/prover/extra_env_steps_fraction": "extra env steps",
    "credit/vict/abstained": "abstained", "credit/vict/trigger_rate": "rollouts corrected",
    "credit/vict/sparsity": "actions corrected", "credit/gigpo/shared_turns": "shared turns",
    "eval/greedy/success": "held-out success",
}


def step_line(row: Mapping[str, float], steps: int) -> str:
    """A step's short log line: reward and success (RL), its key figures, its seconds."""
    parts = [f"{label} {row[k]:.3f}" for k, label in (("reward/mean", "reward"),
                                                       ("success/rate", "success")) if k in row]
    parts += [f"{label} {row[k]:.3g}" for k, label in KEY_FIGURES.items() if k in row]
    seconds = sum(v for k, v in row.items() if k.startswith("time/"))
    return f"step {row['step'] + 1}/{steps}: " + ", ".join(parts) + f" | {seconds:.1f} s"


SAMPLES = 2  # episodes of the step's most credited group written to samples.jsonl: best, worst


def sample_records(groups: Sequence[Sequence[Episode]], parts: Mapping[str, Any],
                   positions: Sequence[int]) -> list[dict]:
    """The best and the worst episode of the most credited of `groups` (`most_credited`; the
    first of equals), as text, with each action's credit.

    Args:
      groups: this process's groups of the step, in the batch's row order.
      parts: float [B, T] per-turn advantages of the batch's rows by source, "outcome" and
        what each method added to it (`credit.parts`).
      positions: each group's position in the step (`process_groups`).

    Returns:
      One record per episode: task, group (its position in the step), member, reward, the first
      observation and per action its text, whether it was valid, the observation after it, its
      credit and the credit's parts.
    """
    if not any(groups):
        return []
    parts = {name: np.asarray(jax.device_get(value)) for name, value in parts.items()}
    starts = np.cumsum([0, *map(len, groups)])
    chosen = max(range(len(groups)), key=lambda g: (
        most_credited([value[starts[g]:starts[g + 1]] for name, value in parts.items()
                       if name != "outcome"]), -g))
    group = groups[chosen]
    order = sorted(range(len(group)), key=lambda m: group[m].reward)
    records = []
    for member in dict.fromkeys([order[-1], order[0]][:SAMPLES]):
        episode, row = group[member], int(starts[chosen]) + member
        records.append({
            "task": f"{episode.task.env}/{episode.task.split}/{episode.task.index}",
            "group": positions[chosen], "member": member, "reward": episode.reward,
            "observation": episode.observations[0] if episode.observations else "",
            "actions": [{"action": action.text, "valid": valid, "observation": after,
                         "credit": float(sum(value[row, t] for value in parts.values())),
                         "parts": {name: float(value[row, t]) for name, value in parts.items()}}
                        for t, (action, valid, after) in enumerate(zip(
                            episode.actions, episode.valid, episode.observations[1:]))]})
    return records


def merged_records(records: Mapping[str, list[dict]]) -> dict[str, list[dict]]:
    """Every process's host-side records of the step, name by name, in process order."""
    merged: dict[str, list[dict]] = {}
    for own in distributed.gather_objects(dict(records)):
        for name, lines in own.items():
            merged.setdefault(name, []).extend(lines)
    return merged


def task_at(tasks: Sequence, position: int, seed: int):
    """The task at `position` of the data stream: the tasks in a fresh seeded order each
    epoch (a pass over all of them)."""
    epoch, index = divmod(position, len(tasks))
    order = np.random.default_rng([seed, epoch]).permutation(len(tasks))
    return tasks[int(order[index])]


class Laps:
    """Wall-clock seconds of consecutive phases: `lap(name)` ends the phase since the last."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name], self._last = now - self._last, now
