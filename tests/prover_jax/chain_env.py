"""A chain whose success probability is known in closed form under a stochastic policy.

The agent stands at position k of N. ``advance`` moves it on (reaching N wins, reward 1);
anything else ends the episode with reward 0. :class:`ChainPolicy` advances from position k
with probability ``p[k]``, so from position k an episode succeeds with ``prod(p[k:])``.
"""

from __future__ import annotations

from envs.base import Env, Step, Task
from prover_jax.rollout import Action, Policy

LENGTH = 6


class Chain(Env):
    name = "chain"
    max_turns = 20

    def __init__(self):
        self._state: tuple[Task, int, int, bool] | None = None

    def split_size(self, split):
        return 4

    def reset(self, task):
        self.check_task(task)
        self._state = (task, 0, 0, False)
        return "position 0"

    def step(self, action):
        task, position, turn, done = self._state
        if done:
            raise RuntimeError("chain: the episode is over")
        valid = action == "advance"
        position = position + 1 if valid else position
        won = position == LENGTH
        done = won or not valid or turn + 1 >= self.max_turns
        self._state = (task, position, turn + 1, done)
        return Step(f"position {position}", done, float(won),
                    {"valid": valid, "won": won, "truncated": False})

    def snapshot(self):
        return self._state

    def restore(self, state):
        self._state = state

    def verifier(self, task=None):
        raise NotImplementedError("the chain has no verifier")

    def instruction(self):
        return "advance to the end"

    def expert_action(self):
        return "advance"

    def random_action(self, rng):
        return rng.choice(["advance", "stumble"])


class ChainPolicy(Policy):
    """Advances from position k with probability ``p[k]``, else stumbles."""

    def __init__(self, p):
        self.p = p

    def act(self, episodes, slots, pool, rngs):
        del slots, pool
        positions = [int(e.observations[-1].split()[-1]) for e in episodes]
        return [Action("advance" if rng.random() < self.p[k] else "stumble")
                for k, rng in zip(positions, rngs)]


def success_probability(p, position: int) -> float:
    out = 1.0
    for q in p[position:]:
        out *= q
    return out
