"""The shop of one configuration: catalogue, search index and goals, built once per process."""

from __future__ import annotations

import dataclasses
import functools

from envs.base import Task
from envs.webshop import catalogue as catalogue_lib
from envs.webshop.catalogue import Catalogue
from envs.webshop.goals import Goal, Goals
from envs.webshop.search import SearchIndex
from envs.webshop.vocab import PRODUCT_TYPES

NAME = "webshop"
MIN_PRODUCTS_PER_TYPE = 10


@dataclasses.dataclass(frozen=True)
class Config:
    """What fixes a shop: the catalogue seed and size, and the number of goals per split.

    The defaults mirror WebShop's canonical splits (10,587 train and 500 eval goals).
    """

    seed: int = 0
    num_products: int = 6000
    train_goals: int = 10_587
    eval_goals: int = 500

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"webshop: {field.name} must be an int, got {value!r}")
        if self.seed < 0:
            raise ValueError(f"webshop: seed must be >= 0, got {self.seed}")
        least = MIN_PRODUCTS_PER_TYPE * len(PRODUCT_TYPES)
        if self.num_products < least:
            raise ValueError(f"webshop: num_products must be >= {least} "
                             f"({MIN_PRODUCTS_PER_TYPE} per product type), got "
                             f"{self.num_products}")
        if self.train_goals < 1 or self.eval_goals < 1:
            raise ValueError(f"webshop: each split needs at least one goal, got "
                             f"train_goals={self.train_goals}, eval_goals={self.eval_goals}")


@dataclasses.dataclass(frozen=True)
class World:
    """Everything about a shop that does not change during an episode."""

    config: Config
    catalogue: Catalogue
    index: SearchIndex
    goals: Goals

    def goal(self, task: Task) -> Goal:
        """The goal of ``task``."""
        return self.goals(task)

    def search(self, keywords: str) -> tuple[int, ...]:
        """Catalogue indices of the top results for ``keywords``, best first."""
        return self.index.search(keywords)


@functools.lru_cache(maxsize=4)
def world_of(config: Config) -> World:
    """The shop of ``config`` (cached: building it takes about a second)."""
    catalogue = catalogue_lib.build(config.seed, config.num_products)
    index = SearchIndex([product.text() for product in catalogue.products])
    goals = Goals(catalogue, config.seed, NAME, config.eval_goals)
    return World(config, catalogue, index, goals)
