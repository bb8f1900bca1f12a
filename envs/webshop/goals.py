"""Shopping goals in WebShop's schema, and the disjoint train / eval splits.

A goal names a target product (``asin``) and asks for its product type, 1–3 of its
attributes, one of its values for every option it has, and a price bound. The bound follows
WebShop's goal generator: of the four multiples of ten above the target's price, two are
drawn and the higher one is the bound (so the target is always within budget). The
instruction text mixes WebShop's human ("i need a long lasting lipstick in ruby red color")
and synthetic ("... with color: ruby red, and size: large") phrasings and always ends with
", and price lower than X.00 dollars".

Each task's goal is drawn from its own seed (the environment seed and ``task_seed(task)``).
A train draw whose instruction text is also an eval instruction is redrawn from the same
random stream, so no instruction is shared across splits.
"""

from __future__ import annotations

import dataclasses
import math
import random

from envs.base import Task, task_seed
from envs.webshop.catalogue import Catalogue, listing

_OPENERS = ("i need", "i am looking for", "find me", "i want", "i would like", "get me",
            "i'm looking for", "can you find")
_MAX_REDRAWS = 100


@dataclasses.dataclass(frozen=True)
class Goal:
    """What the shopper wants; the fields are WebShop's goal fields."""

    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    goal_options: tuple[tuple[str, str], ...]  # (option name, wanted value)
    price_upper: float
    product_type: str
    category: str
    query: str  # the product type's search term (WebShop's ``query``)


def draw(catalogue: Catalogue, rng: random.Random) -> Goal:
    """A goal for a random product of ``catalogue``."""
    product = catalogue[rng.randrange(len(catalogue))]
    wanted = min(rng.choice((1, 2, 2, 3)), len(product.attributes))
    attributes = tuple(rng.sample(product.attributes, wanted))
    goal_options = tuple((name, rng.choice(values)) for name, values in product.options)
    price_upper = price_bound(rng, product.price)
    text = instruction(rng, product.product_type, attributes, goal_options, price_upper)
    return Goal(product.asin, text, attributes, goal_options, price_upper,
                product.product_type, product.category, product.product_type)


def price_bound(rng: random.Random, price: float) -> float:
    """The higher of two draws among the four multiples of ten above ``price``."""
    first = (math.floor(price / 10) + 1) * 10
    return float(max(rng.sample(range(first, first + 40, 10), 2)))


def instruction(rng: random.Random, product_type: str, attributes: tuple[str, ...],
                goal_options: tuple[tuple[str, str], ...], price_upper: float) -> str:
    """The instruction text of a goal, in one of WebShop's phrasings."""
    plural = product_type.endswith("s")
    wanted = listing(attributes)
    if rng.random() < 0.5:
        thing = f"{wanted} {product_type}"
    else:
        thing = f"{product_type} that {'are' if plural else 'is'} {wanted}"
    article = "" if plural else "an " if thing[0] in "aeiou" else "a "
    if not goal_options:
        options = ""
    elif rng.random() < 0.5:
        options = " with " + ", and ".join(f"{name}: {value}" for name, value in goal_options)
    else:
        options = " in " + " and ".join(f"{value} {name}" for name, value in goal_options)
    return (f"{rng.choice(_OPENERS)} {article}{thing}{options}, "
            f"and price lower than {price_upper:.2f} dollars")


class Goals:
    """The goals of every task of one catalogue; eval instructions never appear in train."""

    def __init__(self, catalogue: Catalogue, seed: int, env_name: str, eval_size: int):
        self._catalogue = catalogue
        self._seed = seed
        self._eval = tuple(self._draw(Task(env_name, "eval", i)) for i in range(eval_size))
        self._eval_texts = frozenset(goal.instruction_text for goal in self._eval)
        self._train: dict[int, Goal] = {}

    def __call__(self, task: Task) -> Goal:
        """The goal of ``task`` (its index must be in range; the environment checks)."""
        if task.split == "eval":
            return self._eval[task.index]
        if task.index not in self._train:
            self._train[task.index] = self._draw_train(task)
        return self._train[task.index]

    def _rng(self, task: Task) -> random.Random:
        return random.Random(task_seed(task) + (self._seed << 64))

    def _draw(self, task: Task) -> Goal:
        return draw(self._catalogue, self._rng(task))

    def _draw_train(self, task: Task) -> Goal:
        rng = self._rng(task)
        for _ in range(_MAX_REDRAWS):
            goal = draw(self._catalogue, rng)
            if goal.instruction_text not in self._eval_texts:
                return goal
        raise RuntimeError(f"webshop: no train goal for {task} avoids the eval instructions")
