"""The WebShop environment: find, customise and buy the product an instruction describes.

The episode state is a :class:`envs.webshop.site.State` named tuple of the config, the task,
a few ints and strings: a snapshot is the tuple itself and restoring is an assignment. The
shop (catalogue, search index, goals) is built once per process and configuration and shared
by every instance, so a fresh instance restores any snapshot of the same configuration.

Buying ends the episode with the purchase reward (:mod:`envs.webshop.reward`); after 15
actions without a purchase it ends with reward 0 and ``truncated``. ``info["won"]`` is strict
success (reward exactly 1).
"""

from __future__ import annotations

import random

from envs.base import Env, Step, Task
from envs.webshop import expert, site
from envs.webshop.goals import Goal
from envs.webshop.site import Page, State
from envs.webshop.verifier import WebShopVerifier
from envs.webshop.world import NAME, Config, World, world_of

SEARCH_RATE = 0.15  # how often a random action searches from a page without the search bar
_MAX_QUERY_WORDS = 5

INSTRUCTION = (
    "You are shopping in an online store. Each turn you see the current web page as a list "
    "of elements separated by [SEP]; the instruction at the top says what to buy. Reply "
    "with exactly one action: search[keywords] to search the store (on the page with the "
    "search bar), or click[element] to click a button, a product id or an option value "
    "exactly as the page writes it (case does not matter). An action that does not fit the "
    "page changes nothing. Find a product that matches the instruction's product type, "
    "attributes, options and price, select its options on the product page, and click[Buy "
    "Now] within 15 actions."
)


class WebShop(Env):
    """WebShop-style shopping (10,587 train and 500 eval goals by default, as WebShop)."""

    name = NAME
    max_turns = site.MAX_TURNS

    def __init__(self, seed: int = 0, num_products: int = 6000, train_goals: int = 10_587,
                 eval_goals: int = 500):
        self.config = Config(seed, num_products, train_goals, eval_goals)
        self._world = world_of(self.config)
        self._state: State | None = None

    def split_size(self, split: str) -> int:
        return {"train": self.config.train_goals, "eval": self.config.eval_goals}[split]

    def reset(self, task: Task) -> str:
        self.check_task(task)
        self._state = site.initial_state(self.config, task)
        return site.render(self._world, self._state)

    def step(self, action: str) -> Step:
        self.check_action(action)
        state = self._running()
        moved = site.transition(self._world, state, action)
        new = (moved or state)._replace(turn=state.turn + 1)
        self._state = new
        bought = new.page is Page.DONE
        reward = site.reward_of(self._world, new)
        truncated = not bought and new.turn >= self.max_turns
        info = {"valid": moved is not None, "won": bought and reward == 1.0,
                "truncated": truncated}
        return Step(site.render(self._world, new), bought or truncated, reward, info)

    def snapshot(self) -> State:
        return self._running(finished_ok=True)

    def restore(self, state: State) -> None:
        if not isinstance(state, State):
            raise TypeError(f"webshop: cannot restore a {type(state).__name__}")
        if state.config != self.config:
            raise ValueError(f"webshop: the state belongs to a shop with {state.config}, "
                             f"this one has {self.config}")
        self._state = state

    def verifier(self, task: Task | None = None) -> WebShopVerifier:
        if task is None:
            task = self._running(finished_ok=True).task
        else:
            self.check_task(task)
        return WebShopVerifier(self._world, task)

    def admissible(self) -> list[str]:
        return site.admissible(self._world, self._running())

    def instruction(self) -> str:
        return INSTRUCTION

    def expert_action(self) -> str:
        return expert.expert_action(self._world, self._running())

    def random_action(self, rng: random.Random) -> str:
        """A click on a random clickable, or (always on the search page, else at
        ``SEARCH_RATE``) a search for 1–5 random words of the instruction."""
        state = self._running()
        buttons = site.clickables(self._world, state)
        if not buttons or rng.random() < SEARCH_RATE:
            words = _instruction_words(self.goal.instruction_text)
            count = rng.randint(1, min(_MAX_QUERY_WORDS, len(words)))
            return f"search[{' '.join(rng.sample(words, count))}]"
        return f"click[{rng.choice(buttons)}]"

    @property
    def goal(self) -> Goal:
        """The running episode's goal (hidden from the agent except through the instruction)."""
        return self._world.goal(self._running(finished_ok=True).task)

    @property
    def world(self) -> World:
        """The shop: catalogue, search index and goals."""
        return self._world

    def _running(self, finished_ok: bool = False) -> State:
        if self._state is None:
            raise RuntimeError("webshop: call reset(task) or restore(state) first")
        if not finished_ok and site.is_over(self._state):
            raise RuntimeError("webshop: the episode is over; reset or restore first")
        return self._state


def _instruction_words(text: str) -> list[str]:
    """The words of an instruction before its price clause, without punctuation."""
    wanted = text.split(", and price lower than")[0]
    return wanted.replace(",", " ").replace(":", " ").split()
