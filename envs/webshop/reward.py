"""WebShop's purchase reward, on this catalogue.

    reward = (matched attributes + matched options + [price <= price_upper])
             / (number of goal attributes + number of goal options + 1)
             * type_score

as WebShop's ``get_reward``. Departures, because this catalogue is structured where WebShop's
is scraped text:

- ``type_score`` is 1.0 for the goal's product type, 0.5 for another type of the goal's
  category and 0.1 for a product of another category. WebShop grades the same three
  outcomes by fuzzy matches of query, category path and title nouns (1.0 / 0.5 / 0.1, and
  0.0 when no title noun matches).
- A goal attribute matches when the product has it (WebShop: a fuzzy match against the
  product's attributes, or a substring of its title, features or description; here an
  attribute is written into a product's text exactly when the product has it).
- A goal option matches when the value selected for that option name is the goal's value
  (WebShop fuzzy-matches every selected value against every goal value).

Strict success is ``reward == 1``.
"""

from __future__ import annotations

from envs.webshop.catalogue import Product
from envs.webshop.goals import Goal

SAME_TYPE = 1.0
SAME_CATEGORY = 0.5
OTHER_CATEGORY = 0.1


def type_score(product: Product, goal: Goal) -> float:
    """1.0 same product type, 0.5 same category, 0.1 otherwise."""
    if product.product_type == goal.product_type:
        return SAME_TYPE
    return SAME_CATEGORY if product.category == goal.category else OTHER_CATEGORY


def attribute_matches(product: Product, goal: Goal) -> int:
    """How many goal attributes the product has."""
    return sum(attribute in product.attributes for attribute in goal.attributes)


def option_matches(selected: tuple[tuple[str, str], ...], goal: Goal) -> int:
    """How many goal options have the goal's value selected."""
    chosen = dict(selected)
    return sum(chosen.get(name) == value for name, value in goal.goal_options)


def within_budget(product: Product, goal: Goal) -> bool:
    """True if the product's price is at most the goal's bound."""
    return product.price <= goal.price_upper


def purchase_reward(product: Product, selected: tuple[tuple[str, str], ...], goal: Goal) -> float:
    """The reward for buying ``product`` with the ``selected`` (name, value) options."""
    matched = (attribute_matches(product, goal) + option_matches(selected, goal)
               + int(within_budget(product, goal)))
    total = len(goal.attributes) + len(goal.goal_options) + 1
    return matched / total * type_score(product, goal)
