"""SearchQA: Search-R1's format by hand, the generated knowledge base, user files, the expert,
exact snapshots and the instrumented verifier."""

from __future__ import annotations

import itertools
import json
import random
import re

import hypothesis.strategies as st
import pytest
from hypothesis import given

import envs
from envs.base import Task
from envs.searchqa import (
    BM25Retriever,
    Passage,
    SearchQA,
    exact_match,
    generated,
    kb,
    normalize_answer,
    parse_action,
)
from envs.searchqa.format import INVALID_FEEDBACK, format_information
from envs.verifier import Status, check_atoms, reconstruction_error
from tests.envs.test_protocol import _play

SAT, UNSAT = Status.SAT, Status.UNSAT


@pytest.fixture(scope="module")
def env() -> SearchQA:
    return SearchQA()


def _task(split: str, index: int) -> Task:
    return Task("searchqa", split, index)


def _sample(env: SearchQA, split: str, n: int) -> list[Task]:
    """``n`` tasks spread evenly over ``split``."""
    size = env.num_tasks(split)
    return [_task(split, i * size // n) for i in range(n)]


# --- Search-R1's format, by hand -------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("<search>capital of France</search>", ("search", "capital of France")),
    ("I think.\n<search>\n  two\nlines \n</search> trailing", ("search", "two\nlines")),
    ("<answer> Paris </answer>", ("answer", "Paris")),
    # both tags: the first complete pair wins
    ("<answer>x</answer><search>y</search>", ("answer", "x")),
    ("<search>y</search><answer>x</answer>", ("search", "y")),
    # an opening tag without its own closing tag is skipped, as the regex skips it
    ("<answer>x <search>q</search>", ("search", "q")),
    ("<search>q</answer> <answer>a</answer>", ("answer", "a")),
    # nested: the outer pair's content runs to its first closing tag
    ("<answer>a<search>q</search>b</answer>", ("answer", "a<search>q</search>b")),
    ("<search></search>", ("search", "")),
    ("", (None, "")),
    ("<search>unclosed", (None, "")),
    ("</search>closed only<search>", (None, "")),
    ("<SEARCH>upper</SEARCH>", (None, "")),
    ("<search>ünïcødé ☃</search>", ("search", "ünïcødé ☃")),
])
def test_parse_action_by_hand(text, expected):
    assert tuple(parse_action(text)) == expected


_FRAGMENTS = st.sampled_from(["<search>", "</search>", "<answer>", "</answer>", "x", " y\n",
                              "<", ">", "/", "search", "☃"])


@given(st.lists(_FRAGMENTS, max_size=14).map("".join))
def test_parse_action_matches_search_r1_regex(text):
    """Reference: Search-R1's ``re.search(r'<(search|answer)>(.*?)</\\1>', text, re.DOTALL)``."""
    match = re.search(r"<(search|answer)>(.*?)</\1>", text, re.DOTALL)
    expected = (match.group(1), match.group(2).strip()) if match else (None, "")
    assert tuple(parse_action(text)) == expected


def test_parse_action_on_huge_input():
    """A backtracking (quadratic) parse would not return from this in any useful time."""
    text = "<search>" * 200_000 + "<answer> ok </answer>" + "<search>x" * 200_000
    assert tuple(parse_action(text)) == ("answer", "ok")


@pytest.mark.parametrize("text, expected", [
    ("The Eiffel Tower!", "eiffel tower"),  # article and punctuation dropped
    ("  an   Apple,\tpie ", "apple pie"),  # whitespace collapsed
    ("Theatre of the Absurd", "theatre of absurd"),  # only whole-word articles
    ("Saint-Étienne", "saintétienne"),  # ASCII punctuation only; case folded
    ("A", ""),
])
def test_normalize_answer_by_hand(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_any_gold():
    golds = ("Velmaria", "Republic of Velmaria")
    assert exact_match("the republic of velmaria.", golds) == 1.0
    assert exact_match("Velmaria!", golds) == 1.0
    assert exact_match("Velmaria City", golds) == 0.0


def test_information_layout_is_search_r1s():
    hits = [("7", "Alpha", "first text"), ("3", '"Beta"', "second\ntext"), ("9", "Gamma", "")]
    assert format_information(hits) == (
        "\n\n<information>Doc 1(Title: Alpha) first text\nDoc 2(Title: \"Beta\") second\ntext\n"
        "Doc 3(Title: Gamma)</information>\n\n")


# --- BM25 -------------------------------------------------------------------------------------

def test_bm25_returns_positive_scores_ties_by_index():
    retriever = BM25Retriever([Passage("a", "Cat", "a cat"), Passage("b", "Dog", "a dog"),
                               Passage("c", "Cat", "a cat"), Passage("d", "Cat", "a cat"),
                               Passage("e", "Cow", "a cow")])
    assert [h[0] for h in retriever.search("cat", 2)] == ["a", "c"]  # three-way tie
    assert [h[0] for h in retriever.search("dog dog dog", 3)] == ["b"]  # only matches
    assert retriever.search("the of and", 3) == []  # stopwords only
    assert retriever.search("", 3) == []


# --- generated knowledge base ------------------------------------------------------------------

def test_generated_kb_is_deterministic_and_split(env):
    fresh = generated.__wrapped__(0)  # uncached
    cached = generated(0)
    assert fresh.passages == cached.passages and fresh.questions == cached.questions
    assert generated.__wrapped__(1).passages != cached.passages
    train = {q.question for q in cached.questions["train"]}
    evals = {q.question for q in cached.questions["eval"]}
    assert len(train) == env.num_tasks("train") >= 5000
    assert len(evals) == env.num_tasks("eval") >= 500
    assert not train & evals
    hops = {len(q.hops) for q in cached.questions["train"]}
    assert hops == {1, 2, 3}


def test_every_hop_is_supported_by_passages_naming_its_target():
    dataset = generated(0)
    for split in ("train", "eval"):
        for question in dataset.questions[split]:
            for hop in question.hops:
                assert hop.support
                assert all(hop.target in dataset.texts[d] for d in hop.support)
            assert not exact_match(question.wrong_answer, question.answers)


def test_answers_are_unique_after_normalisation():
    world = kb.make_world(random.Random(0))
    names = [normalize_answer(e.name) for e in world.entities]
    assert len(set(names)) == len(names)


# --- environment --------------------------------------------------------------------------------

def test_registered():
    assert isinstance(envs.make("searchqa"), SearchQA)


def test_search_shows_top3_in_search_r1_layout(env):
    obs = env.reset(_task("eval", 0))
    assert obs == f"Question: {env.question(_task('eval', 0)).question}\n"
    step = env.step("<think>hmm</think><search> Velm born in </search>")
    hits = env.retriever.search("Velm born in", 3)
    assert len(hits) == 3
    assert step.obs == format_information(hits)
    assert step.info == {"valid": True, "action": "search", "doc_ids": tuple(h[0] for h in hits),
                         "truncated": False}
    lines = step.obs.strip().removeprefix("<information>").removesuffix("</information>")
    assert [line[:13] for line in lines.split("\n")] == [
        f"Doc {i}(Title: " for i in (1, 2, 3)] and not step.done
    assert env.snapshot().retrieved == tuple(h[0] for h in hits)


@pytest.mark.parametrize("action", [
    "", "   ", "no tags at all", "<search>unclosed", "<answer>unclosed", "<search>  </search>",
    "</answer>backwards<answer>", "<search>" * 50_000, "ünïcødé ☃ " * 1000, "<Search>x</Search>",
])
def test_malformed_actions_get_feedback(env, action):
    env.reset(_task("train", 3))
    step = env.step(action)
    assert step == (INVALID_FEEDBACK, False, 0.0,
                    {"valid": False, "action": None, "truncated": False})
    assert env.snapshot().turn == 1


def test_huge_and_unicode_searches_are_valid(env):
    env.reset(_task("train", 3))
    assert env.step("<search>" + "river " * 100_000 + "</search>").info["valid"]
    assert env.step("<search>ünïcødé ☃</search>").obs == "\n\n<information></information>\n\n"


def test_answer_ends_with_exact_match(env):
    task = _task("train", 5)
    gold = env.question(task).answers[0]
    env.reset(task)
    assert env.step(f"<answer> the {gold.upper()}. </answer><search>x</search>") == (
        "", True, 1.0, {"valid": True, "truncated": False, "action": "answer"})
    env.reset(task)
    assert env.step(f"<answer>{gold} x</answer>").reward == 0.0
    with pytest.raises(RuntimeError, match="over"):
        env.step("<answer>again</answer>")


def test_turn_limit_truncates(env):
    env.reset(_task("eval", 1))
    steps = [env.step("<search>river</search>" if t % 2 else "nothing") for t in range(30)]
    assert [s.done for s in steps] == [False] * 29 + [True]
    assert steps[-1].reward == 0.0 and steps[-1].info["truncated"]
    assert env.verifier().score(env.snapshot()) == 0.0
    env.reset(_task("eval", 1))
    for _ in range(29):
        env.step("nothing")
    last = env.step(env.expert_action().replace("search", "answer"))
    assert last.done and not last.info["truncated"]


def test_misuse_raises():
    fresh = SearchQA()
    with pytest.raises(RuntimeError, match="reset"):
        fresh.step("<search>x</search>")
    with pytest.raises(ValueError, match="out of range"):
        fresh.reset(_task("train", 10**7))
    with pytest.raises(TypeError, match="State"):
        fresh.restore(("searchqa", 0))
    with pytest.raises(ValueError, match="topk"):
        SearchQA(topk=0)



def test_expert_solves_both_splits_by_retrieving_every_hop(env):
    for split in ("train", "eval"):
        solved, tasks = 0, _sample(env, split, 300)
        for task in tasks:
            env.reset(task)
            while not (step := env.step(env.expert_action())).done:
                pass
            statuses = env.verifier().statuses(env.snapshot())
            solved += step.reward == 1.0 and all(s == SAT for s in statuses)
        assert solved >= 0.99 * len(tasks), split


def test_expert_finishes_after_random_turns(env):
    rng, solved, total = random.Random(0), 0, 0
    for task in _sample(env, "train", 60) + _sample(env, "eval", 60):
        env.reset(task)
        steps = _play(env, rng, 4, 0.0)
        if steps and steps[-1][1].done:
            continue
        while not (step := env.step(env.expert_action())).done:
            pass
        solved += step.reward == 1.0
        total += 1
    assert total and solved >= 0.99 * total


# --- verifier -------------------------------------------------------------------------------------

def test_atoms_are_well_formed_for_every_task(env):
    for split in env.splits:
        for task in env.tasks(split):
            verifier = env.verifier(task)
            check_atoms(verifier.atoms)
            hops = len(env.question(task).hops)
            assert [a.id for a in verifier.atoms] == [
                f"retrieved:hop{k}" for k in range(hops)] + ["answer"]
            assert verifier.atoms[-1].parents == tuple(range(hops))


def test_atoms_follow_the_expert(env):
    """A 3-hop question: statuses only rise (UNSAT → SAT) and end all SAT; the answer commits."""
    task = next(t for t in env.tasks("eval") if len(env.question(t).hops) == 3)
    env.reset(task)
    verifier = env.verifier()
    trace = [verifier.statuses(env.snapshot())]
    commits = []
    while True:
        action = env.expert_action()
        commits.append(verifier.commits(action))
        step = env.step(action)
        trace.append(verifier.statuses(env.snapshot()))
        if step.done:
            break
    assert trace[0] == (UNSAT,) * 4 and trace[-1] == (SAT,) * 4
    assert all(a <= b for before, after in itertools.pairwise(trace) for a, b in zip(before, after))
    assert commits[-1] == {3} and not any(commits[:-1])
    assert verifier.aggregate(trace[-1]) == step.reward == 1.0


def test_commits_use_the_first_complete_tag(env):
    verifier = env.verifier(_task("train", 0))
    answer = len(verifier.atoms) - 1
    assert verifier.commits("<answer>x</answer>") == {answer}
    assert verifier.commits("<search>q</search><answer>x</answer>") == set()
    assert verifier.commits("<answer>x <search>q</search>") == set()
    assert verifier.commits("plain text") == set()


@pytest.mark.parametrize("expert_rate", [1.0, 0.0, 0.6])
def test_reconstruction_is_exact_on_rollouts_and_mutations(env, expert_rate):
    rng, lowered = random.Random(2), []
    for task in _sample(env, "train", 40) + _sample(env, "eval", 40):
        env.reset(task)
        steps = _play(env, rng, env.max_turns, expert_rate)
        state, verifier = env.snapshot(), env.verifier()
        assert state.done and verifier.score(state) == steps[-1][1].reward
        assert reconstruction_error(verifier, state) == 0.0
        names = set()
        for mutation in verifier.mutations(state):
            names.add(mutation.name.split(" for ")[0])
            assert mutation.state.done
            assert reconstruction_error(verifier, mutation.state) == 0.0, mutation.name
            lowered.append(verifier.score(mutation.state) < verifier.score(state))
        assert "wrong answer" in names
        if expert_rate == 1.0:
            assert "missing evidence" in names
    assert any(lowered) or expert_rate == 0.0


def test_missing_evidence_mutation_unsatisfies_one_hop(env):
    task = _task("eval", 7)
    env.reset(task)
    while not env.step(env.expert_action()).done:
        pass
    verifier = env.verifier()
    state = env.snapshot()
    hops = len(env.question(task).hops)
    for mutation in verifier.mutations(state):
        statuses = verifier.statuses(mutation.state)
        if mutation.name == "wrong answer":
            assert statuses == (SAT,) * hops + (UNSAT,)
            assert verifier.score(mutation.state) == 0.0
        else:
            k = int(mutation.name.rsplit(" ", 1)[1])
            assert statuses[k] == UNSAT and statuses[-1] == SAT
            assert verifier.score(mutation.state) == 1.0


def test_verifier_rejects_another_tasks_state(env):
    env.reset(_task("train", 0))
    with pytest.raises(ValueError, match="verifier of"):
        env.verifier(_task("train", 1)).score(env.snapshot())


# --- user corpus and question files -------------------------------------------------------------

CORPUS = [
    {"id": "0", "contents": "\"Evan Morris\"\nEvan Morris was a lobbyist born in Ohio."},
    {"id": 1, "contents": "Ohio\nOhio is a state of the United States."},
    {"id": "2", "contents": "Lake Erie\nLake Erie borders Ohio and Ontario."},
    {"id": "3", "contents": "Paris\nParis is the capital of France."},
]


def _write(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" if isinstance(r, dict) else r
                            for r in records), encoding="utf-8")
    return str(path)


@pytest.fixture
def user_env(tmp_path) -> SearchQA:
    corpus = _write(tmp_path / "corpus.jsonl", CORPUS)
    train = _write(tmp_path / "train.jsonl", [
        {"question": "Where was Evan Morris born?", "golden_answers": ["Ohio", "OH"],
         "supporting_ids": ["0"]},
        {"id": "q7", "question": "What is the capital of France?", "golden_answers": ["Paris"]},
    ])
    test = _write(tmp_path / "test.jsonl", [
        {"question": "Which state did Evan Morris live in, which borders Lake Erie?",
         "golden_answers": ["Ohio"], "supporting_ids": ["0", ["2", 1]]},
    ])
    return SearchQA(corpus=corpus, questions={"train": train, "eval": test})


def test_user_corpus_and_questions(user_env):
    assert (user_env.num_tasks("train"), user_env.num_tasks("eval")) == (2, 1)
    question = user_env.question(_task("train", 1))
    assert (question.id, question.answers, question.hops) == ("q7", ("Paris",), ())
    user_env.reset(_task("train", 0))
    step = user_env.step("<search>Evan Morris</search>")
    assert step.obs.startswith(
        "\n\n<information>Doc 1(Title: \"Evan Morris\") Evan Morris was a lobbyist born in Ohio.")
    assert user_env.step("<answer>oh</answer>").reward == 1.0


def test_user_questions_get_atoms_from_supporting_ids(user_env):
    assert [a.id for a in user_env.verifier(_task("train", 1)).atoms] == ["answer"]
    verifier = user_env.verifier(_task("eval", 0))
    assert [a.id for a in verifier.atoms] == ["retrieved:hop0", "retrieved:hop1", "answer"]
    assert user_env.question(_task("eval", 0)).hops[1].support == ("2", "1")
    user_env.reset(_task("eval", 0))
    user_env.step("<search>Lake Erie Ontario</search>")
    assert verifier.statuses(user_env.snapshot())[:2] == (UNSAT, SAT)


def test_user_expert_searches_then_answers(user_env):
    for task in user_env.tasks("train") + user_env.tasks("eval"):
        user_env.reset(task)
        assert parse_action(user_env.expert_action()).kind == "search"
        user_env.step(user_env.expert_action())
        step = user_env.step(user_env.expert_action())
        assert step.done and step.reward == 1.0


def test_custom_retriever(tmp_path):
    class First:
        def search(self, query, k):
            return [("3", "Paris", f"{query}!")][:k]

    corpus = _write(tmp_path / "c.jsonl", CORPUS)
    questions = _write(tmp_path / "q.jsonl", [{"question": "q?", "golden_answers": ["a"]}])
    env = SearchQA(corpus=corpus, questions={"train": questions}, retriever=First())
    assert env.num_tasks("eval") == 0
    env.reset(_task("train", 0))
    assert env.step("<search>hi</search>").obs == (
        "\n\n<information>Doc 1(Title: Paris) hi!</information>\n\n")


@pytest.mark.parametrize("lines, message", [
    (["{not json\n"], r"c\.jsonl:1: invalid JSON"),
    ([CORPUS[0], "[1, 2]\n"], r"c\.jsonl:2: expected a JSON object"),
    ([CORPUS[0], "\n", {"id": "5"}], r"c\.jsonl:3: \"contents\" must be a string"),
    ([{"id": None, "contents": "x"}], r"c\.jsonl:1: \"id\" must be"),
    ([CORPUS[0], CORPUS[0]], r"c\.jsonl:2: duplicate id '0' \(first on line 1\)"),
    ([], r"c\.jsonl: no passages"),
])
def test_malformed_corpus_names_file_and_line(tmp_path, lines, message):
    corpus = _write(tmp_path / "c.jsonl", lines)
    questions = _write(tmp_path / "q.jsonl", [{"question": "q?", "golden_answers": ["a"]}])
    with pytest.raises(ValueError, match=message):
        SearchQA(corpus=corpus, questions={"train": questions})


@pytest.mark.parametrize("lines, message", [
    ([{"golden_answers": ["a"]}], r"q\.jsonl:1: \"question\" must be"),
    ([{"question": "q", "golden_answers": "a"}], r"q\.jsonl:1: \"golden_answers\" must be"),
    ([{"question": "q", "golden_answers": []}], r"q\.jsonl:1: \"golden_answers\" must be"),
    ([{"question": "q", "golden_answers": ["a"], "supporting_ids": ["0", ["9"]]}],
     r"q\.jsonl:1: supporting ids \['9'\] are not in the corpus"),
    ([{"question": "q", "golden_answers": ["a"], "supporting_ids": [[]]}],
     r"q\.jsonl:1: a supporting_ids entry"),
    ([{"id": "x", "question": "q", "golden_answers": ["a"]}, "\n",
      {"id": "x", "question": "r", "golden_answers": ["b"]}],
     r"q\.jsonl:3: duplicate question id 'x' \(first on line 1\)"),
    (["\n"], r"q\.jsonl: no questions"),
])
def test_malformed_questions_name_file_and_line(tmp_path, lines, message):
    corpus = _write(tmp_path / "c.jsonl", CORPUS)
    questions = _write(tmp_path / "q.jsonl", lines)
    with pytest.raises(ValueError, match=message):
        SearchQA(corpus=corpus, questions={"train": questions})


def test_user_config_errors(tmp_path):
    corpus = _write(tmp_path / "c.jsonl", CORPUS)
    with pytest.raises(ValueError, match="needs both"):
        SearchQA(corpus=corpus)
    with pytest.raises(ValueError, match="needs both"):
        SearchQA(questions={"train": corpus})
    with pytest.raises(ValueError, match="unknown question splits"):
        SearchQA(corpus=corpus, questions={"test": corpus})
