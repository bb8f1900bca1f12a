"""WebShop-style shopping: a generated catalogue, BM25 search, WebShop's pages and reward.

``envs.make("webshop")`` (or :class:`WebShop` directly) builds the environment; the shop of a
configuration is generated once per process. See :mod:`envs.webshop.env` for the episode
rules, :mod:`envs.webshop.reward` for the reward and :mod:`envs.webshop.verifier` for its
VICT atoms.
"""

from envs.base import register
from envs.webshop.env import INSTRUCTION, WebShop
from envs.webshop.goals import Goal
from envs.webshop.site import Page, State
from envs.webshop.verifier import WebShopVerifier
from envs.webshop.world import Config

register(WebShop.name, WebShop)

__all__ = ["INSTRUCTION", "Config", "Goal", "Page", "State", "WebShop", "WebShopVerifier"]
