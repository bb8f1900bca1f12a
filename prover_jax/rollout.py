"""The multi-turn rollout engine: many episodes at once over an environment pool.

An :class:`Episode` records everything later stages need: the observations the policy saw,
its actions (with, for a model policy, the context tokens each read and the tokens and log-probs
it sampled: the episode's token stream), whether the environment accepted each action, the
snapshot after every action, and the reward. ``Episode.prefix(t)`` cuts an episode before its
turn ``t``; :func:`run` continues any mix of fresh starts and prefixes to termination (or for a
fixed number of actions), batching one policy call and one pool step per turn over every live
episode. This is how groups are rolled out and how ProVer
and SPO restore a mid-episode state and sample continuations from it.

A :class:`Policy` maps contexts (the episode so far) to actions. :class:`ScriptedPolicy`
(the environment's expert, with random actions mixed in) needs no model and stays useful in
tests and benchmarks; the JAX model policy of the trainer implements the same protocol.
"""

from __future__ import annotations

import abc
import dataclasses
import random
from collections.abc import Hashable, Sequence

import tqdm

from envs.base import Task
from envs.pool import EnvPool
from prover_jax.batch import TokenStream


@dataclasses.dataclass(frozen=True)
class Action:
    """One policy action: its text and, for a model policy, its tokens.

    `context_ids` are the tokens the policy read after the previous action's (the prompt before
    the first action; the observation block and generation prompt later), `token_ids` the
    reply it sampled and `logprobs` the sampler's log-probability of each. Together over an
    episode's actions they are its token stream (`Episode.stream`).
    """

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    context_ids: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Episode:
    """A (possibly unfinished) episode.

    ``observations[t]`` is what the policy saw before action t (``observations[0]`` is the reset
    text) and ``observations[T]`` the observation after the last action; ``states[t]`` is the
    snapshot before action t. A fresh episode not yet reset has no observations.
    ``next_context_ids`` are the context tokens a prefix's next action read in the episode it
    was cut from (so a continuation reads exactly them); ``overflow`` marks an episode ended
    because its token stream would not fit the policy's context (it is also ``truncated``).
    """

    task: Task
    observations: tuple[str, ...] = ()
    actions: tuple[Action, ...] = ()
    valid: tuple[bool, ...] = ()
    states: tuple[Hashable, ...] = ()
    reward: float = 0.0
    done: bool = False
    truncated: bool = False
    next_context_ids: tuple[int, ...] = ()
    overflow: bool = False

    @property
    def num_turns(self) -> int:
        return len(self.actions)

    def prefix(self, turn: int) -> Episode:
        """The episode before action ``turn`` (its state is ``states[turn]``), not done; its
        token stream is this one's up to that action's context."""
        if not 0 <= turn <= self.num_turns:
            raise ValueError(f"turn {turn} outside 0..{self.num_turns}")
        context = self.actions[turn].context_ids if turn < self.num_turns else ()
        return Episode(self.task, self.observations[: turn + 1], self.actions[:turn],
                       self.valid[:turn], self.states[: turn + 1], next_context_ids=context)

    def stream(self) -> TokenStream:
        """The episode's tokens as the policy read and sampled them, through its last reply.

        Raises:
          ValueError: an action without tokens (e.g. from a scripted policy), or an episode
            without actions.
        """
        if not self.actions:
            raise ValueError("the episode has no actions, so no tokens to train on")
        if any(not a.token_ids or (t == 0 and not a.context_ids)
               for t, a in enumerate(self.actions)):
            raise ValueError("the episode's actions carry no token ids (a scripted policy's?); "
                             "only a model policy's episodes have a token stream")
        return TokenStream.from_turns([a.context_ids for a in self.actions],
                                      [a.token_ids for a in self.actions],
                                      [a.logprobs for a in self.actions])

    def extend(self, action: Action, observation: str, valid: bool, state: Hashable,
               reward: float, done: bool, truncated: bool) -> Episode:
        """The episode with one more action."""
        return dataclasses.replace(
            self, observations=self.observations + (observation,),
            actions=self.actions + (action,), valid=self.valid + (valid,),
            states=self.states + (state,), reward=reward, done=done, truncated=truncated,
            next_context_ids=())


PENDING = "pending"  # `Policy.act`: this episode's action is still being decoded


class Policy(abc.ABC):
    """Chooses the next action of each episode."""

    @abc.abstractmethod
    def act(self, episodes: Sequence[Episode], slots: Sequence[int], pool: EnvPool,
            rngs: Sequence[random.Random]) -> list[Action | str | None]:
        """One action per episode; ``slots[i]`` holds ``episodes[i]`` in ``pool`` and
        ``rngs[i]`` is its own random stream (its action must not depend on any other's, so an
        episode plays the same in any batch). None ends an episode whose context is full
        (`run` marks it truncated and ``overflow``). `PENDING` (a policy that decodes
        continuously) leaves the episode as it is: `run` asks again, with the episodes that
        took an action meanwhile."""


class ScriptedPolicy(Policy):
    """The environment's expert (its random choices, if it makes any, drawn from the
    episode's stream: `Env.sampled_expert_action`), replaced by a random action with
    probability ``epsilon``, then by the episode's previous action again with probability
    ``repeats`` (usually one the environment rejects: the agent is already there, already
    holds the object, the receptacle is already open)."""

    def __init__(self, epsilon: float = 0.0, repeats: float = 0.0):
        if not (0.0 <= epsilon <= 1.0 and 0.0 <= repeats <= 1.0):
            raise ValueError(f"epsilon and repeats must be in [0, 1], got {epsilon}, {repeats}")
        self.epsilon, self.repeats = epsilon, repeats

    def act(self, episodes, slots, pool, rngs):
        return [Action(text) for text, _ in self.choose(episodes, slots, pool, rngs)]

    def choose(self, episodes: Sequence[Episode], slots: Sequence[int], pool: EnvPool,
               rngs: Sequence[random.Random]) -> list[tuple[str, bool]]:
        """(action text, whether it is a random one or a repeat) for each slot, slot i's drawn
        from ``rngs[i]``."""
        explore = [rng.random() < self.epsilon for rng in rngs]
        seeds = [rng.getrandbits(63) for rng in rngs]
        expert = [(s, seed) for s, e, seed in zip(slots, explore, seeds) if not e]
        randoms = [(s, seed) for s, e, seed in zip(slots, explore, seeds) if e]
        texts = {}
        if expert:
            texts.update(zip([s for s, _ in expert], pool.sampled_expert_actions(
                [s for s, _ in expert], [seed for _, seed in expert])))
        if randoms:
            chosen = pool.random_actions([s for s, _ in randoms], [seed for _, seed in randoms])
            texts.update(zip([s for s, _ in randoms], chosen))
        chosen = [(texts[s], e) for s, e in zip(slots, explore)]
        if self.repeats:  # drawn after the expert's and the noise's, which stay as they were
            chosen = [(e.actions[-1].text, True)
                      if e.actions and rng.random() < self.repeats else choice
                      for e, rng, choice in zip(episodes, rngs, chosen)]
        return chosen


def start(task: Task) -> Episode:
    """A fresh episode of ``task`` (``run`` resets it)."""
    return Episode(task)


def rng_streams(rng: random.Random | Sequence[random.Random], count: int
                ) -> list[random.Random]:
    """One random stream per item (episode, group, tree): ``rng`` itself when it is already
    one per item, else ``count`` streams seeded from it in order.

    Raises:
      ValueError: a sequence of streams of another length than ``count``.
    """
    if isinstance(rng, random.Random):
        return [random.Random(rng.getrandbits(64)) for _ in range(count)]
    if len(rng) != count:
        raise ValueError(f"rng: {len(rng)} random streams for {count} items")
    return list(rng)


def run(pool: EnvPool, policy: Policy, episodes: Sequence[Episode],
        rng: random.Random | Sequence[random.Random], max_actions: int | None = None,
        progress: str | None = None) -> list[Episode]:
    """Continues every episode to termination (or for ``max_actions`` more actions).

    Fresh episodes are reset (``max_actions=0`` only resets them); prefixes are restored from
    their last snapshot. At most
    ``pool.num_slots`` episodes run at once; the rest wait for a free slot.

    Args:
      pool: the environment pool (its kind must match the episodes' tasks).
      policy: chooses actions.
      episodes: fresh starts and/or unfinished prefixes.
      rng: the source of the policy's randomness: one stream, or one per episode
        (`rng_streams`). Each episode's actions are drawn from its own stream, so the run is
        deterministic given it, and with streams per episode an episode plays the same in any
        batch.
      max_actions: stop each episode after this many new actions (None: run to the end).
      progress: the label of a progress bar over the episodes, drawn on terminals only (None:
        no bar).

    Returns:
      The continued episodes, in input order.
    """
    rngs = rng_streams(rng, len(episodes))
    finished = {i: e for i, e in enumerate(episodes) if e.done}
    queue = [i for i in reversed(range(len(episodes))) if i not in finished]
    running: dict[int, tuple[int, Episode, int]] = {}  # slot -> (index, episode, actions taken)
    bar = tqdm.tqdm(total=len(episodes), desc=progress, unit="episode", leave=False,
                    disable=None if progress else True)
    while queue or running:
        bar.update(len(finished) - bar.n)
        free = [s for s in range(pool.num_slots) if s not in running]
        _admit(pool, episodes, queue, free, running)
        if max_actions == 0:  # only reset or restore
            finished.update({i: e for i, e, _ in running.values()})
            running.clear()
            continue
        acting = sorted(running)
        chosen = policy.act([running[s][1] for s in acting], acting, pool,
                            [rngs[running[s][0]] for s in acting])
        for slot, action in zip(acting, chosen):
            if action is None:
                index, episode, _ = running.pop(slot)
                finished[index] = dataclasses.replace(episode, done=True, truncated=True,
                                                      overflow=True)
        slots = [s for s, a in zip(acting, chosen) if isinstance(a, Action)]
        actions = [a for a in chosen if isinstance(a, Action)]
        if not slots:
            continue
        steps = pool.step(slots, [a.text for a in actions])
        states = pool.snapshot(slots)
        for slot, action, step, state in zip(slots, actions, steps, states):
            index, episode, taken = running.pop(slot)
            episode = episode.extend(action, step.obs, bool(step.info["valid"]), state,
                                     step.reward, step.done, bool(step.info["truncated"]))
            taken += 1
            if episode.done or taken == max_actions:
                finished[index] = episode
            else:
                running[slot] = (index, episode, taken)
    bar.close()
    return [finished[i] for i in range(len(episodes))]


def _admit(pool, episodes, queue, free, running) -> None:
    """Moves queued episodes into free slots: reset the fresh ones, restore the others."""
    batch = [(slot, queue.pop()) for slot in free[: len(queue)]]
    fresh = [(slot, i) for slot, i in batch if not episodes[i].observations]
    resumed = [(slot, i) for slot, i in batch if episodes[i].observations]
    if fresh:
        slots = [slot for slot, _ in fresh]
        observations = pool.reset(slots, [episodes[i].task for _, i in fresh])
        states = pool.snapshot(slots)
        for (slot, i), observation, state in zip(fresh, observations, states):
            running[slot] = (i, Episode(episodes[i].task, (observation,), (), (), (state,)), 0)
    if resumed:
        pool.restore([slot for slot, _ in resumed], [episodes[i].states[-1] for _, i in resumed])
        for slot, i in resumed:
            running[slot] = (i, episodes[i], 0)
