"""The WebShop environment: catalogue, goals, pages, reward, snapshots, expert and verifier."""

from __future__ import annotations

import dataclasses
import pickle
import random
import re

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from envs import Task
from envs.verifier import Kind, Status, check_atoms, reconstruction_error
from envs.webshop import Config, Page, State, WebShop
from envs.webshop import reward as reward_lib
from envs.webshop.catalogue import Product
from envs.webshop.expert import fits
from envs.webshop.goals import Goal
from envs.webshop.search import TOP_N, SearchIndex
from envs.webshop.vocab import CATEGORIES, PRODUCT_TYPES

SAT, UNSAT, UNK = Status.SAT, Status.UNSAT, Status.UNK


@pytest.fixture(scope="module")
def env() -> WebShop:
    return WebShop()


def _task(split: str, index: int) -> Task:
    return Task("webshop", split, index)


def _finish(env: WebShop, rng: random.Random, expert_rate: float) -> list:
    """Plays to the end, each action the expert's with probability ``expert_rate``."""
    steps = []
    while not steps or not steps[-1].done:
        action = env.expert_action() if rng.random() < expert_rate else env.random_action(rng)
        steps.append(env.step(action))
    return steps


def _open_first_result(env: WebShop, query: str) -> str:
    env.step(f"search[{query}]")
    asin = next(a for a in env.admissible() if re.fullmatch(r"click\[b0[a-z0-9]{8}\]", a))
    return env.step(asin).obs


# --- catalogue and search ---------------------------------------------------------------


def test_catalogue_size_categories_and_ids(env):
    catalogue = env.world.catalogue
    assert len(catalogue) >= 5000
    assert len(set(CATEGORIES)) >= 10 and set(catalogue.by_category) == set(CATEGORIES)
    assert all(len(catalogue.by_type[t.name]) >= 10 for t in PRODUCT_TYPES)
    asins = [p.asin for p in catalogue.products]
    assert len(set(asins)) == len(asins)
    assert all(re.fullmatch(r"B0[A-Z0-9]{8}", a) for a in asins)
    first = catalogue[0]
    assert first.attributes and first.options and first.price > 0 and first.features


def test_catalogue_is_deterministic_and_seeded():
    from envs.webshop import catalogue as catalogue_lib

    a, b = catalogue_lib.build(7, 800), catalogue_lib.build(7, 800)
    assert a.products == b.products
    assert catalogue_lib.build(8, 800).products != a.products


def test_product_text_mentions_exactly_its_attributes(env):
    """An attribute phrase of the product's type appears in its page text iff it has it."""
    pools = {t.name: t.attributes for t in PRODUCT_TYPES}
    for product in env.world.catalogue.products:
        text = " ".join((product.title, product.description, *product.features)).lower()
        for attribute in pools[product.product_type]:
            mentioned = re.search(rf"(?<![a-z0-9]){re.escape(attribute)}(?![a-z0-9])", text)
            assert bool(mentioned) == (attribute in product.attributes), (product, attribute)


def test_search_breaks_ties_by_index_and_caps_results():
    index = SearchIndex(["red apple", "green apple", "red apple", "banana"])
    # docs 0 and 2 are identical (a tie); both contain two query terms, doc 1 only one
    assert index.search("apple red") == (0, 2, 1)
    assert index.search("kiwi") == ()


def test_search_on_the_catalogue(env):
    results = env.world.search("dark chocolate bar")
    assert len(results) == TOP_N
    assert env.world.catalogue[results[0]].product_type == "dark chocolate bar"
    assert env.world.search("dark chocolate bar") == results
    assert env.world.search("zzzz qqqq") == ()


# --- goals ----------------------------------------------------------------------------------


def test_split_sizes_and_disjoint_instructions(env):
    assert env.num_tasks("train") >= 5000 and env.num_tasks("eval") >= 500
    train = {env.world.goal(t).instruction_text for t in env.tasks("train")}
    evals = {env.world.goal(t).instruction_text for t in env.tasks("eval")}
    assert not train & evals
    assert len(train) > 0.9 * env.num_tasks("train")


def test_goals_are_deterministic_and_satisfiable(env):
    fresh = WebShop()
    for task in env.tasks("eval")[:100] + env.tasks("train")[:100]:
        goal = env.world.goal(task)
        assert fresh.world.goal(task) == goal
        target = env.world.catalogue[env.world.catalogue.by_asin[goal.asin.lower()]]
        assert fits(target, goal)
        assert reward_lib.purchase_reward(target, goal.goal_options, goal) == 1.0
        text = goal.instruction_text
        assert text.endswith(f", and price lower than {goal.price_upper:.2f} dollars")
        assert goal.product_type in text and all(a in text for a in goal.attributes)
        assert all(v in text for _, v in goal.goal_options)
        assert 1 <= len(goal.attributes) <= 3 and goal.price_upper % 10 == 0


# --- pages and actions ----------------------------------------------------------------------


def test_pages_clickables_and_navigation(env):
    obs = env.reset(_task("train", 0))
    instruction = env.goal.instruction_text
    assert obs == f"WebShop [SEP] Instruction: [SEP] {instruction} [SEP] Search"
    assert env.admissible() == ["search[<your query>]"]

    step = env.step("search[dark chocolate bar]")
    assert step.info["valid"] and not step.done
    assert step.obs.startswith(f"Instruction: [SEP] {instruction} [SEP] Back to Search "
                               "[SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B0")
    actions = env.admissible()
    assert actions[:2] == ["click[back to search]", "click[next >]"] and len(actions) == 12

    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in env.step("click[next >]").obs
    assert "Page 1 (Total results: 50) [SEP] Next >" in env.step("click[< prev]").obs

    asin = actions[2][len("click["):-1]
    product = env.world.catalogue[env.world.catalogue.by_asin[asin]]
    item = env.step(f"click[{asin.upper()}]").obs  # case does not matter
    assert item.endswith(f"[SEP] {product.title} [SEP] Price: ${product.price:.2f} [SEP] "
                         "Description [SEP] Features [SEP] Buy Now")
    name, values = product.options[0]
    assert f"< Prev [SEP] {name} [SEP] {' [SEP] '.join(values)}" in item
    assert env.admissible()[:2] == ["click[back to search]", "click[< prev]"]
    assert env.admissible()[-3:] == ["click[description]", "click[features]", "click[buy now]"]

    env.step(f"click[{values[1]}]")
    assert env.snapshot().options == ((name, values[1]),)
    assert env.step("click[description]").obs.endswith(f"< Prev [SEP] {product.description}")
    assert env.step("click[< prev]").obs == item
    assert env.step("click[features]").obs.endswith(" [SEP] ".join(product.features))
    assert env.admissible() == ["click[back to search]", "click[< prev]"]
    env.step("click[< prev]")
    assert env.snapshot().options == ((name, values[1]),)  # sub-pages keep the selection
    env.step("click[< prev]")  # back to the results clears it, as WebShop's session does
    assert env.snapshot().page is Page.RESULTS and env.snapshot().options == ()
    assert env.step("click[back to search]").obs == obs


def test_search_runs_from_any_page_as_in_webshop(env):
    env.reset(_task("train", 1))
    _open_first_result(env, "yoga mat")
    step = env.step("search[coffee mug]")
    assert step.info["valid"] and env.snapshot().page is Page.RESULTS


def test_buying_ends_the_episode_with_the_reward(env):
    env.reset(_task("eval", 3))
    steps = _finish(env, random.Random(0), expert_rate=1.0)
    last = steps[-1]
    assert last.done and last.reward == 1.0 and last.info == {
        "valid": True, "won": True, "truncated": False}
    assert last.obs.startswith("Thank you for shopping with us! [SEP] Purchased [SEP] asin")
    assert last.obs.endswith("Your score (min 0.0, max 1.0) [SEP] 1.0")
    with pytest.raises(RuntimeError, match="over"):
        env.step("click[buy now]")


def test_no_purchase_in_15_turns_is_truncated_with_zero(env):
    env.reset(_task("train", 2))
    steps = [env.step("search[yoga mat]") for _ in range(15)]
    assert [s.done for s in steps] == [False] * 14 + [True]
    assert steps[-1].reward == 0.0 and steps[-1].info["truncated"] and not steps[-1].info["won"]


@pytest.mark.parametrize("where", ["search", "results", "item", "features"])
def test_malformed_actions_change_nothing(env, where):
    env.reset(_task("train", 5))
    if where != "search":
        env.step("search[running shoes]")
    if where in ("item", "features"):
        env.step(env.admissible()[-1])
    if where == "features":
        env.step("click[features]")
    garbage = ["", "   ", "asdf", "search[", "search[]", "search[   ]", "click[]", "click[",
               "click[b0zzzzzzzz]", "click[search]", "click[ünïcødé ☃]", "ünïcødé ☃ " * 3,
               "x" * 10_000, "search[" + "long " * 2000 + "]", "click[next >]extra",
               "buy now", "click [buy now]"]
    if where != "item":
        garbage += ["click[buy now]", "click[description]", "click[black]", "click[large]"]
    if where == "item":
        garbage += ["click[next >]", env.admissible()[0].replace("back", "bakc")]
    for action in garbage:
        before = env.snapshot()
        step = env.step(action)
        after = env.snapshot()
        assert step.info["valid"] is False, action[:40]
        assert step.reward == 0.0 and not step.done
        assert after == before._replace(turn=before.turn + 1)
        env.restore(before)


def test_random_actions_are_valid(env):
    rng = random.Random(3)
    for index in range(30):
        env.reset(_task("train", index))
        for step in _finish(env, rng, expert_rate=0.0):
            assert step.info["valid"]


# --- reward -------------------------------------------------------------------------------


def _goal(**changes) -> Goal:
    goal = Goal(asin="B0TARGET01", instruction_text="i need ...",
                attributes=("gluten free", "non gmo"),
                goal_options=(("flavor", "mint"), ("size", "12 pack")), price_upper=30.0,
                product_type="dark chocolate bar", category="grocery",
                query="dark chocolate bar")
    return dataclasses.replace(goal, **changes)


def _product(**changes) -> Product:
    product = Product(index=0, asin="B0OTHER001", title="t", product_type="dark chocolate bar",
                      category="grocery", attributes=("gluten free", "organic", "vegan"),
                      options=(("flavor", ("mint", "orange")), ("size", ("6 pack", "12 pack"))),
                      price=25.0, description="d", features=("f",))
    return dataclasses.replace(product, **changes)


def test_reward_formula_by_hand():
    goal, product = _goal(), _product()
    wrong_size = (("flavor", "mint"), ("size", "6 pack"))
    # 1 attribute (gluten free, not non gmo) + 1 option (mint) + price 25 <= 30 → 3 of 2+2+1
    assert reward_lib.purchase_reward(product, wrong_size, goal) == 3 / 5 * 1.0
    # another type of the same category: × 0.5; another category: × 0.1
    assert reward_lib.purchase_reward(
        _product(product_type="protein bar"), wrong_size, goal) == 3 / 5 * 0.5
    assert reward_lib.purchase_reward(
        _product(product_type="yoga mat", category="sports"), wrong_size, goal) == 3 / 5 * 0.1
    # everything matches → (2 + 2 + 1) / 5 = 1
    full = _product(attributes=("non gmo", "gluten free"))
    assert reward_lib.purchase_reward(full, goal.goal_options, goal) == 1.0
    # over budget: 35 > 30 → (2 + 2 + 0) / 5 = 0.8
    assert reward_lib.purchase_reward(_product(attributes=("non gmo", "gluten free"),
                                               price=35.0), goal.goal_options, goal) == 0.8
    # nothing selected, one attribute, within budget → (1 + 0 + 1) / 5 = 0.4
    assert reward_lib.purchase_reward(product, (), goal) == 0.4
    # the bound is inclusive, as WebShop's `price <= price_upper`
    assert reward_lib.within_budget(_product(price=30.0), goal)


# --- snapshots ------------------------------------------------------------------------------


@settings(max_examples=25)
@given(split=st.sampled_from(["train", "eval"]), index=st.integers(0, 499),
       seed=st.integers(0, 2**32), prefix=st.integers(0, 10),
       expert_rate=st.sampled_from([0.0, 0.3, 0.8]),
       garbage=st.lists(st.text(max_size=30), max_size=3))
def test_snapshot_restore_replays_bit_for_bit(split, index, seed, prefix, expert_rate,
                                             garbage):
    env = WebShop()
    env.reset(_task(split, index))
    rng = random.Random(seed)
    for _ in range(prefix):
        if env.step(env.random_action(rng)).done:
            return
    state = env.snapshot()
    revived = pickle.loads(pickle.dumps(state))
    assert revived == state and hash(revived) == hash(state)
    actions, steps = list(garbage), []
    for action in garbage:
        steps.append(env.step(action))
        if steps[-1].done:
            break
    while not steps or not steps[-1].done:
        action = env.expert_action() if rng.random() < expert_rate else env.random_action(rng)
        actions.append(action)
        steps.append(env.step(action))
    for target, snapshot in ((WebShop(), revived), (env, state)):
        target.restore(snapshot)
        assert [target.step(a) for a in actions[:len(steps)]] == steps


def test_snapshot_is_a_small_immutable_value(env):
    env.reset(_task("train", 9))
    env.step("search[green tea]")
    state = env.snapshot()
    assert isinstance(state, State) and isinstance(state, tuple)
    assert len(pickle.dumps(state)) < 1000  # the task and a few fields, never the catalogue
    with pytest.raises(AttributeError):
        state.page = Page.DONE  # type: ignore[misc]


def test_restore_checks_the_state(env):
    with pytest.raises(TypeError):
        env.restore(("not", "a", "state"))
    other = WebShop(num_products=720)
    other.reset(_task("train", 0))
    with pytest.raises(ValueError, match="belongs to a shop"):
        env.restore(other.snapshot())


# --- expert ---------------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "eval"])
def test_expert_strict_success(env, split):
    rng = random.Random(0)
    indices = rng.sample(range(env.num_tasks(split)), 200)
    won = 0
    for index in indices:
        env.reset(_task(split, index))
        steps = _finish(env, rng, expert_rate=1.0)
        won += steps[-1].info["won"]
        assert all(s.info["valid"] for s in steps)
    assert won >= 0.99 * len(indices)


def test_expert_recovers_mid_episode(env):
    rng = random.Random(1)
    won = total = 0
    for index in range(150):
        env.reset(_task("train", index))
        if any(env.step(env.random_action(rng)).done for _ in range(rng.randint(1, 6))):
            continue
        won += _finish(env, rng, expert_rate=1.0)[-1].info["won"]
        total += 1
    assert total > 100 and won >= 0.99 * total


# --- verifier -------------------------------------------------------------------------------


def test_verifier_reconstructs_the_reward_and_mutations_bite(env):
    rng = random.Random(2)
    for split in ("train", "eval"):
        for index in range(40):
            for expert_rate in (1.0, 0.0, 0.7):
                env.reset(_task(split, index))
                last = _finish(env, rng, expert_rate)[-1]
                state, verifier = env.snapshot(), env.verifier()
                assert verifier.score(state) == last.reward
                assert reconstruction_error(verifier, state) == 0.0
                mutations = verifier.mutations(state)
                assert bool(mutations) == (state.page is Page.DONE)
                for mutation in mutations:
                    assert reconstruction_error(verifier, mutation.state) == 0.0, mutation.name
                    if last.reward == 1.0:
                        assert verifier.score(mutation.state) < 1.0, mutation.name


def test_mutations_cover_the_verifier_relevant_defects(env):
    env.reset(_task("eval", 0))
    _finish(env, random.Random(0), expert_rate=1.0)
    state, verifier = env.snapshot(), env.verifier()
    goal = env.goal
    names = [m.name for m in verifier.mutations(state)]
    assert names == (["not purchased"] + [f"wrong option: {n}" for n, _ in goal.goal_options]
                     + ["over budget", "wrong product type", "wrong category"]
                     + [f"missing attribute: {a}" for a in goal.attributes])
    scores = {m.name: verifier.score(m.state) for m in verifier.mutations(state)}
    assert scores["not purchased"] == 0.0
    assert scores["wrong product type"] <= 0.5 and scores["wrong category"] <= 0.1


def test_atoms_for_every_task(env):
    for split in env.splits:
        for task in env.tasks(split):
            verifier = env.verifier(task)
            check_atoms(verifier.atoms)
            goal = verifier.goal
            assert len(verifier.atoms) == 4 + len(goal.attributes) + len(goal.goal_options)


def test_atom_statuses_along_an_expert_episode(env):
    env.reset(_task("train", 11))
    verifier = env.verifier()
    ids = [a.id for a in verifier.atoms]
    assert ids[:2] == ["category", "product_type"] and ids[-2:] == ["price", "purchased"]
    assert verifier.atoms[-1].kind is Kind.COMMIT and verifier.atoms[-1].irreversible
    assert all(a.parents == (1,) for a in verifier.atoms[2:])
    unbought = (UNK,) * (len(ids) - 1) + (UNSAT,)
    assert verifier.statuses(env.snapshot()) == unbought
    viewed = []
    while not env.step(env.expert_action()).done:
        assert verifier.statuses(env.snapshot()) == unbought  # only the purchase reveals
        viewed.append(verifier.evidence(env.snapshot())["product"])
    assert verifier.statuses(env.snapshot()) == (SAT,) * len(ids)
    evidence = verifier.evidence(env.snapshot())
    assert evidence["purchased"] is True and evidence["product"] == viewed[-1] is not None
    assert verifier.commits("click[Buy Now]") == frozenset(range(len(ids)))
    assert verifier.commits("search[buy now]") == frozenset()
    assert verifier.commits("click[description]") == frozenset()


def test_a_product_viewed_but_not_bought_satisfies_no_atom(env):
    """The atoms are about the purchased product: the last product viewed in an episode that
    never buys is not it, even when it is of the goal's category and type."""
    env.reset(_task("train", 0))  # low calorie green tea
    verifier = env.verifier()
    browse = ["click[features]", "click[< prev]"] * 6
    for action in ["search[low calorie green tea]", "click[b0wew7fqcg]", *browse,
                   "click[description]"]:
        step = env.step(action)
    assert step.done and step.reward == 0.0 and step.info["truncated"]
    state = env.snapshot()
    viewed = env.world.catalogue[state.last_viewed]
    assert (viewed.asin, viewed.category, viewed.product_type) == (
        "B0WEW7FQCG", env.goal.category, env.goal.product_type)
    assert verifier.evidence(state)["product"] == "B0WEW7FQCG"
    assert verifier.statuses(state) == (UNK,) * (len(verifier.atoms) - 1) + (UNSAT,)


def test_aggregate_matches_the_reward_on_hand_statuses(env):
    verifier = env.verifier(_task("train", 4))
    scored = len(verifier.atoms) - 3
    all_sat = (SAT,) * len(verifier.atoms)
    assert verifier.aggregate(all_sat) == 1.0
    assert verifier.aggregate(all_sat[:-1] + (UNSAT,)) == 0.0
    one_missed = (SAT, SAT, UNSAT) + (SAT,) * (scored - 1) + (SAT,)
    assert verifier.aggregate(one_missed) == (scored - 1) / scored * 1.0
    other_type = (SAT, UNSAT) + (SAT,) * scored + (SAT,)
    assert verifier.aggregate(other_type) == 0.5
    assert verifier.aggregate((UNSAT, UNSAT) + (SAT,) * scored + (SAT,)) == 0.1


# --- configuration --------------------------------------------------------------------------


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="num_products"):
        WebShop(num_products=10)
    with pytest.raises(ValueError, match="seed"):
        WebShop(seed=-1)
    with pytest.raises(TypeError, match="seed"):
        Config(seed="0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="goal"):
        Config(eval_goals=0)
    with pytest.raises(RuntimeError, match="reset"):
        WebShop().step("search[x]")
    with pytest.raises(ValueError, match="out of range"):
        WebShop().reset(_task("eval", 500))


def test_registered_and_instruction(env):
    import envs

    assert isinstance(envs.make("webshop"), WebShop)
    assert "search[" in env.instruction() and "click[" in env.instruction()
    assert env.max_turns == 15
