"""How likely a policy is to make the right choice at fixed states, read without sampling.

A :class:`Probe` is a state of an episode the demonstrator played (a prefix, with its token
stream), one action whose probability is read there, and whether taking that action is the
right choice. `choice_probabilities` packs each prefix's stream, the context its next reply
reads and the action's reply as the model writes it (`AgentFormat.reply_text`, then the
end-of-turn token), and takes the exponent of the sum of the model's log-probabilities of the
reply's tokens: teacher-forced, so the number has no sampling noise. `probe_score` is the mean
probability of the right choice: ``p`` where taking the action is right, ``1 - p`` where it is
wrong.

The states come from an environment's choice oracle (`Env.oracle_choice`, hidden state):
household-pivot's are the demonstrator's first choices among look-alikes (it stands at a
receptacle that shows one, holds nothing and has taken none; the action takes it, right iff it
is the goal object). A policy blind to the clue takes the first look-alike it sees a third of
the time and the second half the time, whichever is the goal; a policy that reads the clue
scores 1.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence

import numpy as np

import envs
from envs.pool import EnvPool
from prover_jax.batch import TokenStream, pack_streams
from prover_jax.demonstrations import DemonstrationPolicy
from prover_jax.rollout import Action, Episode, Policy, run, start

PROBE_SEED = 0


@dataclasses.dataclass(frozen=True)
class Probe:
    """A state, an action's reply tokens there, and whether taking the action is right."""

    prefix: Episode  # the episode before the choice; its actions carry their tokens
    context_ids: tuple[int, ...]  # what the choice's reply reads after the prefix's stream
    action: str
    reply_ids: tuple[int, ...]  # the action as the model writes it, end-of-turn included
    right: bool


def choice_probes(pool: EnvPool, demonstrator: Policy, env: envs.Env,
                  tasks: Sequence[envs.Task], rng: random.Random,
                  encode: Callable[[str], Sequence[int]]) -> list[Probe]:
    """The first choice (`Env.oracle_choice`) of the demonstrator's episode of each task;
    tasks whose episode meets none give no probe.

    Args:
      pool: an environment pool of `env`'s kind.
      demonstrator: a policy whose actions carry tokens (`demonstrations.DemonstrationPolicy`).
      env: an environment with a choice oracle.
      tasks: the probes' tasks, one episode each.
      rng: the demonstrator's randomness.
      encode: an action text -> its reply tokens as the model writes it, end-of-turn included.
    """
    if "choice" not in env.oracles:
        raise ValueError(f"{env.name} has no choice oracle (household-pivot has one)")
    probes = []
    for episode in run(pool, demonstrator, [start(t) for t in tasks], rng, progress="probes"):
        for t in range(episode.num_turns):
            choice = env.oracle_choice(episode.states[t])
            if choice is not None:
                action, right = choice
                probes.append(Probe(episode.prefix(t), episode.actions[t].context_ids, action,
                                    tuple(encode(action)), right))
                break
    return probes


def probe_stream(probe: Probe) -> TokenStream:
    """The prefix's stream, then the choice's context and reply (its last turn)."""
    actions = [*probe.prefix.actions, Action(probe.action, probe.reply_ids,
                                             (0.0,) * len(probe.reply_ids), probe.context_ids)]
    return TokenStream.from_turns([a.context_ids for a in actions],
                                  [a.token_ids for a in actions],
                                  [a.logprobs for a in actions])


def choice_probabilities(logprobs: Callable[[np.ndarray], np.ndarray],
                         probes: Sequence[Probe], pad_token_id: int, max_len: int,
                         batch_size: int = 16) -> np.ndarray:
    """float64 [N]: the model's probability of each probe's reply at its state.

    Args:
      logprobs: tokens int32 [B, L] -> float32 [B, L], each token's log-probability given the
        ones before it (`Learner.logprobs` with the params bound).
      probes: the probes.
      pad_token_id, max_len: as `prover_jax.batch.pack`.
      batch_size: probes per call.
    """
    out = np.zeros(len(probes))
    for first in range(0, len(probes), batch_size):
        chunk = probes[first:first + batch_size]
        batch, _ = pack_streams([[probe_stream(p)] for p in chunk], [[0.0] for _ in chunk],
                                pad_token_id=pad_token_id, max_len=max_len)
        scores = np.asarray(logprobs(batch.tokens), np.float64)
        turn_ids = np.asarray(batch.turn_ids)
        for row, probe in enumerate(chunk):
            reply = turn_ids[row] == probe.prefix.num_turns
            out[first + row] = np.exp(scores[row][reply].sum())
    return out


def probe_score(probabilities: np.ndarray, probes: Sequence[Probe]) -> float:
    """The mean probability of the right choice over `probes` (`probabilities` [N])."""
    right = np.array([p.right for p in probes])
    return float(np.mean(np.where(right, probabilities, 1.0 - probabilities)))


def held_out_probes(pool: EnvPool, env: envs.Env, tokenizer, chat,
                    tasks: Sequence[envs.Task]) -> tuple[list[Probe], int]:
    """The probes of the demonstrator's episodes of `tasks` (its randomness seeded with
    `PROBE_SEED`, so every run of a study reads the same states), and the end-of-turn token
    id (which pads them)."""
    demonstrator = DemonstrationPolicy(tokenizer, env.instruction(), chat)
    probes = choice_probes(pool, demonstrator, env, tasks, random.Random(PROBE_SEED),
                           demonstrator.reply_ids)
    return probes, demonstrator.format.end_of_turn


def probe_metrics(logprobs: Callable[[np.ndarray], np.ndarray], probes: Sequence[Probe],
                  pad_token_id: int, max_len: int) -> dict[str, float]:
    """``score`` (`probe_score`), the number of ``states``, and the mean probability of the
    probes' action where it is right (``p_right_action``) and where it is wrong
    (``p_wrong_action``)."""
    p = choice_probabilities(logprobs, probes, pad_token_id, max_len)
    right = np.array([q.right for q in probes])
    return {"states": float(len(probes)), "score": probe_score(p, probes),
            "p_right_action": float(p[right].mean()) if right.any() else 0.0,
            "p_wrong_action": float(p[~right].mean()) if (~right).any() else 0.0}
