"""The shop's web site in WebShop's text mode: pages, clickables, and where an action leads.

Pages and their clickables (lower case, as WebShop's text environment matches them):

    search        the search bar only             search[query] → results
    results       back to search, < prev, next >, the ASINs of the 10 products shown
    item          back to search, < prev, the option values, description, features, buy now
    description   back to search, < prev          (< prev returns to the item page)
    features      back to search, < prev
    done          nothing; the episode is over

As in WebShop's text environment, ``search[...]`` runs from any page (the agent is told to
search only where the search bar is shown, and :func:`admissible` lists it only there);
``click[x]`` must name a clickable of the current page; anything else changes nothing. Going
to a results page (searching, or ``< prev`` from an item) clears the selected options, as
WebShop's session does. Observations are the visible page elements joined by ``[SEP]``,
WebShop's "simple" text mode.
"""

from __future__ import annotations

import enum
import re
from typing import NamedTuple

from envs.base import Task
from envs.webshop.catalogue import Product
from envs.webshop.reward import purchase_reward
from envs.webshop.world import Config, World

MAX_TURNS = 15
PER_PAGE = 10
MAX_ACTION_CHARS = 1000
NONE = -1  # no product
SEP = " [SEP] "
BACK_TO_SEARCH, NEXT, PREV = "back to search", "next >", "< prev"
DESCRIPTION, FEATURES, BUY = "description", "features", "buy now"
SEARCH_ACTION = "search[<your query>]"
_ACTION = re.compile(r"(search|click)\[(.*)\]", re.DOTALL)


class Page(enum.StrEnum):
    """Which page the browser shows."""

    SEARCH = "search"
    RESULTS = "results"
    ITEM = "item"
    DESCRIPTION = "description"
    FEATURES = "features"
    DONE = "done"


class State(NamedTuple):
    """The whole episode state; the shop itself is fixed by ``config`` and ``task``."""

    config: Config
    task: Task
    page: Page
    keywords: str  # the last search, normalised; "" on the search page
    page_num: int  # results page (1-based); kept while an item from it is open
    product: int  # catalogue index of the open item, NONE elsewhere
    options: tuple[tuple[str, str], ...]  # (name, value) selected on the open item
    last_viewed: int  # the last item page opened (what the verifier's evidence is about)
    turn: int  # actions taken


def initial_state(config: Config, task: Task) -> State:
    """The search page before the first action."""
    return State(config, task, Page.SEARCH, "", 0, NONE, (), NONE, 0)


def is_over(state: State) -> bool:
    """True after a purchase or after ``MAX_TURNS`` actions."""
    return state.page is Page.DONE or state.turn >= MAX_TURNS


def parse_action(action: str) -> tuple[str, str] | None:
    """``(verb, argument)`` of ``search[...]`` / ``click[...]``, argument lower-cased and
    whitespace-normalised; None for anything else, an empty argument or an over-long action."""
    if len(action) > MAX_ACTION_CHARS:
        return None
    match = _ACTION.fullmatch(action.strip())
    if match is None:
        return None
    verb, argument = match.groups()
    argument = " ".join(argument.lower().split())
    return (verb, argument) if argument else None


def results_page(world: World, state: State) -> tuple[tuple[int, ...], int]:
    """The catalogue indices listed on the current results page, and the total result count."""
    results = world.search(state.keywords)
    start = (state.page_num - 1) * PER_PAGE
    return results[start:start + PER_PAGE], len(results)


def clickables(world: World, state: State) -> tuple[str, ...]:
    """What ``click[...]`` accepts on the current page, in page order."""
    page = state.page
    if page is Page.RESULTS:
        shown, total = results_page(world, state)
        buttons = [BACK_TO_SEARCH]
        if state.page_num > 1:
            buttons.append(PREV)
        if state.page_num * PER_PAGE < total:
            buttons.append(NEXT)
        return (*buttons, *(world.catalogue[i].asin.lower() for i in shown))
    if page is Page.ITEM:
        values = (v for _, vs in world.catalogue[state.product].options for v in vs)
        return (BACK_TO_SEARCH, PREV, *values, DESCRIPTION, FEATURES, BUY)
    if page in (Page.DESCRIPTION, Page.FEATURES):
        return (BACK_TO_SEARCH, PREV)
    return ()


def admissible(world: World, state: State) -> list[str]:
    """The available actions: the search bar where shown, and ``click[x]`` per clickable."""
    if state.page is Page.SEARCH:
        return [SEARCH_ACTION]
    return [f"click[{c}]" for c in clickables(world, state)]


def transition(world: World, state: State, action: str) -> State | None:
    """The state after ``action`` (turn count unchanged), or None if the action is invalid."""
    parsed = parse_action(action)
    if parsed is None:
        return None
    verb, argument = parsed
    if verb == "search":
        return _results(state, argument, 1)
    if argument not in clickables(world, state):
        return None
    return _click(world, state, argument)


def _results(state: State, keywords: str, page_num: int) -> State:
    return state._replace(page=Page.RESULTS, keywords=keywords, page_num=page_num,
                          product=NONE, options=())


def _click(world: World, state: State, target: str) -> State:
    if target == BACK_TO_SEARCH:
        return state._replace(page=Page.SEARCH, keywords="", page_num=0, product=NONE,
                              options=())
    if state.page is Page.RESULTS:
        if target in (NEXT, PREV):
            return state._replace(page_num=state.page_num + (1 if target == NEXT else -1))
        index = world.catalogue.by_asin[target]
        return state._replace(page=Page.ITEM, product=index, last_viewed=index, options=())
    if state.page is Page.ITEM:
        if target == PREV:
            return _results(state, state.keywords, state.page_num)
        pages = {DESCRIPTION: Page.DESCRIPTION, FEATURES: Page.FEATURES, BUY: Page.DONE}
        if target in pages:
            return state._replace(page=pages[target])
        return _select(world.catalogue[state.product], state, target)
    return state._replace(page=Page.ITEM)  # < prev from a sub-page


def _select(product: Product, state: State, value: str) -> State:
    selected = dict(state.options)
    selected[product.option_of(value)] = value
    ordered = tuple((name, selected[name]) for name, _ in product.options if name in selected)
    return state._replace(options=ordered)


def reward_of(world: World, state: State) -> float:
    """The environment's reward: the purchase reward once bought, else 0."""
    if state.page is not Page.DONE:
        return 0.0
    return purchase_reward(world.catalogue[state.product], state.options,
                           world.goal(state.task))


def render(world: World, state: State) -> str:
    """The observation text of the current page."""
    instruction = world.goal(state.task).instruction_text
    head = f"Instruction:{SEP}{instruction}"
    page = state.page
    if page is Page.SEARCH:
        return f"WebShop{SEP}{head}{SEP}Search"
    if page is Page.DONE:
        return _done_page(world, state)
    parts = [head, "Back to Search"]
    if page is Page.RESULTS:
        shown, total = results_page(world, state)
        parts.append(f"Page {state.page_num} (Total results: {total})")
        if state.page_num > 1:
            parts.append("< Prev")
        if state.page_num * PER_PAGE < total:
            parts.append("Next >")
        for i in shown:
            product = world.catalogue[i]
            parts += [product.asin, product.title, f"${product.price:.2f}"]
        return SEP.join(parts)
    product = world.catalogue[state.product]
    parts.append("< Prev")
    if page is Page.ITEM:
        for name, values in product.options:
            parts += [name, *values]
        parts += [product.title, f"Price: ${product.price:.2f}", "Description", "Features",
                  "Buy Now"]
    elif page is Page.DESCRIPTION:
        parts.append(product.description)
    else:
        parts += product.features
    return SEP.join(parts)


def _done_page(world: World, state: State) -> str:
    product = world.catalogue[state.product]
    chosen = ", ".join(f"{name}: {value}" for name, value in state.options) or "none"
    return SEP.join(("Thank you for shopping with us!", "Purchased", "asin", product.asin,
                     "options", chosen, "Your score (min 0.0, max 1.0)",
                     f"{reward_of(world, state)}"))
