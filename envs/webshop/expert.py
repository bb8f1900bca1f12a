"""The expert shopper: reads the hidden goal, finds a product that scores 1, and buys it.

A product *fits* the goal when it is of the goal's type, has every goal attribute, is within
budget and offers every goal option value; bought with the goal's options selected, it
scores exactly 1. The expert searches for the goal's attributes and type, or, when that
query lists no fitting product on its first two pages, for the target's title. From any
state it returns to a page it can use: sub-page → item, unfitting item → results, results
without a reachable fitting product → search page.
"""

from __future__ import annotations

from envs.webshop import site
from envs.webshop.catalogue import Product
from envs.webshop.goals import Goal
from envs.webshop.site import Page, State
from envs.webshop.world import World

_PRIMARY_PAGES = 2  # how deep the expert pages through its own query's results


def fits(product: Product, goal: Goal) -> bool:
    """True if buying ``product`` with the goal's options scores 1."""
    return (product.product_type == goal.product_type
            and all(a in product.attributes for a in goal.attributes)
            and product.price <= goal.price_upper
            and all(product.offers(name, value) for name, value in goal.goal_options))


def expert_query(world: World, goal: Goal) -> str:
    """The expert's search keywords (normalised as the site normalises them)."""
    primary = " ".join(f"{' '.join(goal.attributes)} {goal.product_type}".split())
    top = world.search(primary)[:_PRIMARY_PAGES * site.PER_PAGE]
    if any(fits(world.catalogue[i], goal) for i in top):
        return primary
    target = world.catalogue[world.catalogue.by_asin[goal.asin.lower()]]
    return " ".join(target.title.lower().split())


def expert_action(world: World, state: State) -> str:
    """The expert's next action in ``state`` (a running episode)."""
    goal = world.goal(state.task)
    page = state.page
    if page is Page.SEARCH:
        return f"search[{expert_query(world, goal)}]"
    if page in (Page.DESCRIPTION, Page.FEATURES):
        return f"click[{site.PREV}]"
    if page is Page.ITEM:
        return _on_item(world.catalogue[state.product], state, goal)
    return _on_results(world, state, goal)


def _on_item(product: Product, state: State, goal: Goal) -> str:
    if not fits(product, goal):
        return f"click[{site.PREV}]"
    selected = dict(state.options)
    for name, value in goal.goal_options:
        if selected.get(name) != value:
            return f"click[{value}]"
    return f"click[{site.BUY}]"


def _on_results(world: World, state: State, goal: Goal) -> str:
    shown, _ = site.results_page(world, state)
    for i in shown:
        if fits(world.catalogue[i], goal):
            return f"click[{world.catalogue[i].asin.lower()}]"
    if state.keywords == expert_query(world, goal):
        results = world.search(state.keywords)
        ranks = [r for r, i in enumerate(results) if fits(world.catalogue[i], goal)]
        if ranks:
            ahead = ranks[0] // site.PER_PAGE + 1 > state.page_num
            return f"click[{site.NEXT if ahead else site.PREV}]"
    return f"click[{site.BACK_TO_SEARCH}]"
