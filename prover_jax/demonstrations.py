"""The environment's expert as token streams a model's rollout would have been: SFT trains on
them (`prover_jax.sft_trainer`) and the choice probe reads its states from them
(`prover_jax.choice_probe`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import envs
from envs.pool import EnvPool
from models.qwen.chat import AgentFormat
from prover_jax.model_policy import next_context
from prover_jax.rollout import Action, Episode, Policy, ScriptedPolicy, run, start
from prover_jax.settings import ChatConfig


@dataclasses.dataclass(frozen=True)
class Demonstration(Action):
    """A demonstrated action: `expert` False for a random one (context, not a target)."""

    expert: bool = True


class DemonstrationPolicy(Policy):
    """The expert (with random actions mixed in) as token streams: each reply is the action
    as the chat setting writes it (`AgentFormat.reply_text`) tokenized, then the end-of-turn
    token, after the context a model would have read.

    A share `noise` of the expert's actions is replaced by random admissible ones; then a share
    `repeats` by the episode's previous action again. A repeated action is usually one the
    environment rejects ("Nothing happens": the agent is already there, already holds the
    object, the receptacle is already open), so the expert's next actions show the way back
    from the mistake the tiny household agent made most (`docs/results.md`). Neither kind is
    trained on."""

    def __init__(self, tokenizer, system: str, chat: ChatConfig, noise: float = 0.0,
                 repeats: float = 0.0):
        self.format = AgentFormat(tokenizer, system, chat.reply, chat.template)
        self.tokenizer = tokenizer
        self.scripted = ScriptedPolicy(noise, repeats)

    def reply_ids(self, text: str) -> tuple[int, ...]:
        """The action ``text`` as the model writes it, tokenized, then the end-of-turn token."""
        return (*self.tokenizer.encode(self.format.reply_text(text), add_special_tokens=False),
                self.format.end_of_turn)

    def act(self, episodes, slots, pool, rngs):
        actions = []
        chosen = self.scripted.choose(episodes, slots, pool, rngs)
        for episode, (text, noisy) in zip(episodes, chosen):
            reply = self.reply_ids(text)
            context = tuple(int(i) for i in next_context(self.format, episode))
            actions.append(Demonstration(text, reply, (0.0,) * len(reply), context, not noisy))
        return actions


def demonstrations(pool: EnvPool, policy: DemonstrationPolicy, tasks: Sequence[envs.Task],
                   rng: random.Random, max_actions: int | None = None) -> list[Episode]:
    """One demonstrated episode per task."""
    return run(pool, policy, [start(t) for t in tasks], rng, max_actions,
               progress="demonstrations")
