"""ProVer's host side (SPEC §2): eligibility, selection, proposal, boundary verification.

For each finished group: a group is eligible when ``min < mean(R) < max`` (defaults 0 and 0.5);
its successful trajectory with the fewest turns (ties: lowest row) is shown to a judge
(:mod:`prover_jax.judges`) together with the group's failures, as policy-visible text only. A
valid proposal ``(l, r)`` is verified by restoring the episode before turn ``l`` (``s_pre``) and
before turn ``r + 1`` (``s_post``) and running ``K`` continuations from each with the same
policy: ``Δ = mean R(post) - mean R(pre)``. The continuations of all eligible groups run as one
batch through :func:`prover_jax.rollout.run`, and never enter the training batch.

The result is the ``prover`` kernel's ``seg_start``, ``seg_end`` and ``delta`` per row (rows in
group order, as ``prover_jax.batch.pack`` lays them out) and the per-step diagnostics of SPEC §2.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import random
import threading
import time
from collections.abc import Sequence

import numpy as np

from envs.base import Env
from envs.pool import EnvPool
from prover_jax.judges.base import Hidden, Judge, Proposal, TrajectoryView, Turn, no_credit
from prover_jax.rollout import Episode, Policy, rng_streams, run

DELTA_BINS = (-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0)
JUDGE_DOWN = "the judge's model was unreachable earlier in this step"


@dataclasses.dataclass(frozen=True)
class VerifyConfig:
    """ProVer's host options (SPEC §2 defaults)."""

    min_success_rate: float = 0.0  # exclusive bounds on the group's mean reward
    max_success_rate: float = 0.5
    continuations: int = 8  # K per boundary
    success_reward: float = 1.0  # a trajectory succeeded when its reward reaches this
    judge_concurrency: int = 8  # proposals asked at once of a judge that waits on a model

    def __post_init__(self):
        if not 0.0 <= self.min_success_rate < self.max_success_rate <= 1.0:
            raise ValueError("need 0 <= min_success_rate < max_success_rate <= 1, got "
                             f"{self.min_success_rate}, {self.max_success_rate}")
        if self.continuations < 1:
            raise ValueError(f"continuations must be >= 1, got {self.continuations}")
        if self.judge_concurrency < 1:
            raise ValueError(f"judge_concurrency must be >= 1, got {self.judge_concurrency}")


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One verified proposal: group, row within the group, segment, boundary values."""

    group: int
    row: int
    start_turn: int
    end_turn: int
    value_pre: float
    value_post: float

    @property
    def delta(self) -> float:
        return self.value_post - self.value_pre


@dataclasses.dataclass(frozen=True)
class ProverResult:
    """Kernel inputs [B] and what happened, for logging."""

    seg_start: np.ndarray  # int32 [B]
    seg_end: np.ndarray  # int32 [B]
    delta: np.ndarray  # float32 [B], 0 where nothing was measured
    proposals: tuple[Proposal | None, ...]  # per group; None where not eligible
    measurements: tuple[Measurement, ...]
    diagnostics: dict[str, float]


def is_eligible(rewards: Sequence[float], config: VerifyConfig) -> bool:
    """``min < mean(R) < max`` with at least one success."""
    mean = float(np.mean(rewards))
    wins = any(r >= config.success_reward for r in rewards)
    return wins and config.min_success_rate < mean < config.max_success_rate


def select(group: Sequence[Episode], config: VerifyConfig) -> int:
    """The successful trajectory with the fewest turns (ties: lowest row)."""
    wins = [i for i, e in enumerate(group) if e.reward >= config.success_reward]
    if not wins:
        raise ValueError("the group has no successful trajectory")
    return min(wins, key=lambda i: (group[i].num_turns, i))


def view(episode: Episode, row: int, env: Env | None = None) -> TrajectoryView:
    """The policy-visible text of an episode: observations shown, actions taken; with
    ``env``, also its hidden state (`judges.base.Hidden`), for a judge that reads states."""
    turns = tuple(Turn(t, episode.observations[t], action.text, episode.valid[t])
                  for t, action in enumerate(episode.actions))
    hidden = Hidden(env, episode.task, episode.states) if env is not None else None
    return TrajectoryView(row, episode.observations[0], turns, episode.reward, hidden)


def prover_step(pool: EnvPool, policy: Policy, judge: Judge,
                groups: Sequence[Sequence[Episode]],
                rng: random.Random | Sequence[random.Random],
                config: VerifyConfig = VerifyConfig(), num_rows: int | None = None,
                env: Env | None = None) -> ProverResult:
    """Judges every eligible group and verifies every valid proposal.

    Args:
      pool: environment pool of the groups' environment kind.
      policy: the policy that produced the groups (continuations use it).
      judge: proposes segments.
      groups: finished episodes per group, in packing order.
      rng: randomness of the judge and the continuations: one stream, or one per group
        (`prover_jax.rollout.rng_streams`). A group's judge and continuations draw from its
        stream alone, so with streams per group its result does not depend on the others.
      config: VerifyConfig.
      num_rows: B of the packed batch (default: the number of episodes).
      env: an environment of the groups' kind, which a judge that ``reads_states`` needs.

    Returns:
      ProverResult.
    """
    rows = sum(len(g) for g in groups)
    num_rows = rows if num_rows is None else num_rows
    if num_rows < rows:
        raise ValueError(f"{rows} episodes do not fit in num_rows={num_rows}")
    if judge.reads_states:
        if env is None:
            raise ValueError(f"{type(judge).__name__} reads states: prover_step needs env")
        judge.check_env(env)
    hidden = env if judge.reads_states else None
    eligible = [g for g, group in enumerate(groups)
                if is_eligible([e.reward for e in group], config)]
    chosen = {g: select(groups[g], config) for g in eligible}
    asks = [(view(groups[g][chosen[g]], chosen[g], hidden),
             [view(e, i, hidden) for i, e in enumerate(groups[g])
              if e.reward < config.success_reward])
            for g in eligible]
    group_rngs = rng_streams(rng, len(groups))
    answers = dict(zip(eligible, judge_all(judge, asks, [group_rngs[g] for g in eligible],
                                           config.judge_concurrency)))
    proposals: list[Proposal | None] = [answers.get(g) for g in range(len(groups))]
    requests = [(g, chosen[g], answers[g].start_turn, answers[g].end_turn)  # group, row, l, r
                for g in eligible if answers[g].valid]
    start = time.perf_counter()
    k = config.continuations
    prefixes, streams = [], []
    for g, row, l, r in requests:
        episode = groups[g][row]
        prefixes += [episode.prefix(l)] * k + [episode.prefix(r + 1)] * k
        streams += rng_streams(group_rngs[g], 2 * k)
    continued = run(pool, policy, prefixes, streams, progress="verify") if prefixes else []
    wall = time.perf_counter() - start
    measurements = []
    for n, (g, row, l, r) in enumerate(requests):
        chunk = continued[2 * k * n: 2 * k * (n + 1)]
        pre = float(np.mean([e.reward for e in chunk[:k]]))
        post = float(np.mean([e.reward for e in chunk[k:]]))
        measurements.append(Measurement(g, row, l, r, pre, post))
    seg_start = np.zeros(num_rows, np.int32)
    seg_end = np.zeros(num_rows, np.int32)
    delta = np.zeros(num_rows, np.float32)
    offsets = np.cumsum([0] + [len(g) for g in groups])
    for m in measurements:
        b = offsets[m.group] + m.row
        seg_start[b], seg_end[b], delta[b] = m.start_turn, m.end_turn, m.delta
    extra = _extra_cost(prefixes, continued)
    own = _own_cost(groups)
    numbers = diagnostics(proposals, measurements, extra, own, wall)
    return ProverResult(seg_start, seg_end, delta, tuple(proposals), tuple(measurements), numbers)


def judge_all(judge: Judge, asks: Sequence[tuple[TrajectoryView, Sequence[TrajectoryView]]],
              rng: random.Random | Sequence[random.Random], concurrency: int = 8
              ) -> list[Proposal]:
    """``judge.propose(success, failures)`` for every ask, in order.

    Every ask has its own generator (`rng_streams` of `rng`: drawn from it in order, or given
    one per ask), so the proposals do not depend on which answer comes first. A judge that
    waits on a model (`Judge.concurrent`) is asked up to `concurrency` at once, other judges
    one by one. Once a proposal finds the model unreachable, the judge is down for the rest of
    the step: the asks not yet sent get no credit (`JUDGE_DOWN`) at no cost.
    """
    down = threading.Event()

    def ask(success_failures, ask_rng):
        if down.is_set():
            return no_credit(JUDGE_DOWN)
        proposal = judge.propose(*success_failures, ask_rng)
        if proposal.unreachable:
            down.set()
        return proposal

    rngs = rng_streams(rng, len(asks))
    if not judge.concurrent or len(asks) < 2:
        return [ask(a, r) for a, r in zip(asks, rngs)]
    with concurrent.futures.ThreadPoolExecutor(min(concurrency, len(asks))) as executor:
        return list(executor.map(ask, asks, rngs))


def _extra_cost(prefixes: Sequence[Episode], continued: Sequence[Episode]) -> tuple[int, int]:
    """(environment steps, generated tokens) of the continuations beyond their prefixes."""
    steps = tokens = 0
    for before, after in zip(prefixes, continued):
        new = after.actions[before.num_turns:]
        steps += len(new)
        tokens += sum(len(a.token_ids) for a in new)
    return steps, tokens


def _own_cost(groups: Sequence[Sequence[Episode]]) -> tuple[int, int]:
    """(environment steps, generated tokens) of the groups' own rollouts."""
    episodes = [e for g in groups for e in g]
    return (sum(e.num_turns for e in episodes),
            sum(len(a.token_ids) for e in episodes for a in e.actions))


def diagnostics(proposals: Sequence[Proposal | None], measurements: Sequence[Measurement],
                extra: tuple[int, int], own: tuple[int, int], wall_s: float) -> dict[str, float]:
    """SPEC §2's per-step numbers, flat."""
    judged = [p for p in proposals if p is not None]
    valid = [p for p in judged if p.valid]
    deltas = np.array([m.delta for m in measurements], np.float64)
    counts, _ = np.histogram(deltas, bins=DELTA_BINS)
    out = {
        "groups": float(len(proposals)),
        "eligible_groups": float(len(judged)),
        "valid_proposals": float(len(valid)),
        "accepted": float((deltas > 0).sum()),
        "acceptance_rate": float((deltas > 0).mean()) if deltas.size else 0.0,
        "mean_segment_turns": float(np.mean([p.end_turn - p.start_turn + 1 for p in valid]))
        if valid else 0.0,
        "mean_delta": float(deltas.mean()) if deltas.size else 0.0,
        "judge_rounds": float(sum(p.rounds for p in judged)),
        "judge_tool_calls": float(sum(p.tool_calls for p in judged)),
        "judge_prompt_tokens": float(sum(p.prompt_tokens for p in judged)),
        "judge_completion_tokens": float(sum(p.completion_tokens for p in judged)),
        "judge_cost": float(sum(p.cost for p in judged)),
        "judge_wall_s": float(sum(p.wall_s for p in judged)),
        "judge_unreachable": float(sum(p.unreachable for p in judged)),
        "judge_skipped_down": float(sum(p.error == JUDGE_DOWN for p in judged)),
        "extra_env_steps": float(extra[0]),
        "extra_env_steps_fraction": extra[0] / own[0] if own[0] else 0.0,
        "extra_policy_tokens": float(extra[1]),
        "extra_policy_tokens_fraction": extra[1] / own[1] if own[1] else 0.0,
        "verification_wall_s": wall_s,
    }
    for (low, high), count in zip(itertools.pairwise(DELTA_BINS), counts):
        closing = "]" if high == DELTA_BINS[-1] else ")"  # numpy's last bin is closed
        out[f"delta_hist[{low:g},{high:g}{closing}"] = float(count)
    return out
