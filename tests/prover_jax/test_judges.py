"""ProVer's judges: segment validity, the agentic judge over real HTTP, random, contrastive."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import random
import re

import pytest

import envs
from prover_jax import judges
from prover_jax.judges import AgenticConfig, AgenticJudge, TrajectoryView, Turn, segment_error
from prover_jax.judges.agentic import parse_answer
from prover_jax.judges.critic import Critic, CriticConfig
from prover_jax.judges.llm import LLM, LLMConfig, LLMError, Session
from prover_jax.judges.offline import ContrastiveJudge, RandomJudge, segment_scores
from prover_jax.server import Call, Calls, Fail, ScriptedBackend, Text, serve

RNG = random.Random(0)


def view(actions, valid=None, reward=0.0, id=0, observations=None, task="find the key"):
    """A TrajectoryView with turn t's observation `obs t` unless given."""
    valid = valid or [True] * len(actions)
    observations = observations or [f"obs {t}" for t in range(len(actions))]
    turns = tuple(Turn(t, o, a, v) for t, (o, a, v) in enumerate(zip(observations, actions, valid)))
    return TrajectoryView(id, task, turns, reward)


def answer(start, end, rationale="because"):
    return Text(json.dumps({"start_turn": start, "end_turn": end, "rationale": rationale}))


# A group: the success opens the drawer before taking the key; the failures never do.
SUCCESS = view(["go to desk 1", "open drawer 1", "take key 1 from drawer 1", "go to door 1",
                "use key 1"], [True, True, True, True, True], 1.0, id=2)
FAILURES = (
    view(["go to desk 1", "take key 1 from desk 1", "look", "inventory"],
         [True, False, True, True], id=0,
         observations=["start", "You arrive at desk 1. On the desk 1, you see a lamp 1.",
                       "Nothing happens.", "You are facing the desk 1."]),
    view(["go to shelf 1", "take key 1 from shelf 1", "go to desk 1"], [True, False, True], id=1),
)


@contextlib.contextmanager
def agentic(*replies, **config):
    """An agentic judge talking to a scripted backend over loopback HTTP."""
    backend = ScriptedBackend(replies)
    with serve(backend) as base_url:
        yield AgenticJudge(AgenticConfig(base_url=base_url, model="scripted", **config)), backend


def propose(*replies, **config):
    with agentic(*replies, **config) as (judge, backend):
        return judge.propose(SUCCESS, FAILURES, RNG), backend


def last_message(request, role):
    return [m for m in request.messages if m["role"] == role][-1]["content"]


# ---------------------------------------------------------------------------------- validity


@pytest.mark.parametrize("start, end, message", [
    (-1, 0, "negative"),
    (2, 1, "after end_turn"),
    (3, 7, "out of range"),
    (4, 4, "terminal turn"),
    (0, 3, "at most 3"),
    (1, 2, r"turns \[2\] .* rejected"),
])
def test_segment_error_names_the_rule_broken(start, end, message):
    trajectory = view(list("abcde"), [True, True, False, True, True])
    assert re.search(message, segment_error(trajectory, start, end, max_segment_turns=3))


def test_valid_segments_pass():
    trajectory = view(list("abcde"))
    assert segment_error(trajectory, 0, 3) is None  # 4 turns, ends at T - 2 = 3
    assert segment_error(trajectory, 3, 3) is None


@pytest.mark.parametrize("text, message", [
    ("segment 1 to 2", "no JSON object"),
    ("{start_turn: 1}", "not valid JSON"),
    ('{"start_turn": 1, "rationale": "x"}', r"lacks \['end_turn'\]"),
    ('{"start_turn": "1", "end_turn": 2, "rationale": "x"}', "start_turn must be an integer"),
    ('{"start_turn": 1, "end_turn": true, "rationale": "x"}', "end_turn must be an integer"),
    ('{"start_turn": 1, "end_turn": 2, "rationale": 3}', "rationale must be a string"),
    ('{"start_turn": ' + "[" * 100_000 + "}", "nested too deeply"),
])
def test_parse_answer_rejects_schema_violations(text, message):
    with pytest.raises(ValueError, match=message):
        parse_answer(text)


def test_parse_answer_takes_the_object_from_a_fence_or_surrounding_text():
    fenced = 'I pick:\n```json\n{"start_turn": 1, "end_turn": 2, "rationale": "r"}\n```'
    assert parse_answer(fenced) == (1, 2, "r")
    assert parse_answer('Answer: {"start_turn": 0, "end_turn": 0, "rationale": ""}.') == (
        0, 0, "")


# ---------------------------------------------------------------------------- agentic judge


def test_a_judge_sends_its_chat_template_arguments():
    _, backend = propose(answer(1, 2), chat_template_kwargs={"enable_thinking": False})
    assert backend.requests[0].body["chat_template_kwargs"] == {"enable_thinking": False}


def test_agentic_valid_answer_and_its_prompt():
    proposal, backend = propose(answer(1, 2, "opening the drawer reveals the key"))
    assert proposal.valid and (proposal.start_turn, proposal.end_turn) == (1, 2)
    assert proposal.rationale == "opening the drawer reveals the key"
    assert (proposal.rounds, proposal.tool_calls) == (1, 0)
    (request,) = backend.requests
    prompt = last_message(request, "user")
    assert "Task:\nfind the key" in prompt
    for turn in SUCCESS.turns:  # the whole successful trajectory, turn-indexed
        assert f"[turn {turn.index}] action: {turn.action}" in prompt
    assert "t1: take key 1 from desk 1 [invalid]" in prompt  # a failure preview
    assert "end_turn <= 3" in prompt and "at most 8 tool calls" in prompt
    assert "chat_template_kwargs" not in request.body  # an OpenAI endpoint gets none
    assert [t["function"]["name"] for t in request.tools] == ["search_trajectory",
                                                               "get_segment"]


def test_failure_previews_are_cut_to_preview_chars():
    long_failure = view([f"wander around the room number {i}" for i in range(60)], id=5)
    with agentic(answer(1, 2), preview_chars=120) as (judge, backend):
        judge.propose(SUCCESS, [long_failure], RNG)
    prompt = last_message(backend.requests[0], "user")
    line = next(x for x in prompt.splitlines() if x.startswith("- trajectory 5"))
    actions = line.split(": ", 1)[1]
    assert len(actions) == 120 and actions.endswith(" …")
    assert "room number 59" not in prompt


INVALID_ANSWERS = {
    "not JSON": (Text("I think turns one to two matter"), "no JSON object"),
    "malformed JSON": (Text('{"start_turn": 1, "end_turn": 2,}'), "not valid JSON"),
    "schema": (Text('{"start": 1, "end": 2}'), "lacks"),
    "out of range": (answer(2, 9), "out of range"),
    "terminal": (answer(3, 4), "terminal turn"),
    "start after end": (answer(3, 1), "after end_turn"),
}


@pytest.mark.parametrize("kind", INVALID_ANSWERS)
def test_each_invalid_answer_is_sent_back_and_corrected(kind):
    bad, message = INVALID_ANSWERS[kind]
    proposal, backend = propose(bad, answer(1, 2))
    assert proposal.valid and (proposal.start_turn, proposal.end_turn) == (1, 2)
    assert proposal.rounds == 2
    correction = last_message(backend.requests[1], "user")
    assert correction.startswith("Your answer was rejected:") and message in correction
    assert "3 attempt(s) left" in correction


def test_too_long_and_invalid_action_segments_are_corrected():
    success = view(list("abcdefgh"), [True, True, False, True, True, True, True, True], 1.0, 9)
    with agentic(answer(1, 5), answer(2, 3), answer(3, 6)) as (judge, backend):
        proposal = judge.propose(success, FAILURES, RNG)
    assert (proposal.start_turn, proposal.end_turn, proposal.rounds) == (3, 6, 3)
    too_long, invalid = (last_message(r, "user") for r in backend.requests[1:])
    assert "the segment has 5 turns; at most 4 are allowed" in too_long
    assert "turns [2] whose actions the environment rejected" in invalid
    assert "2 attempt(s) left" in invalid


def test_exhausting_corrections_is_no_credit():
    proposal, backend = propose(*[answer(4, 4)] * 4)
    assert not proposal.valid and proposal.start_turn is None and proposal.end_turn is None
    assert "still invalid after 3 corrections" in proposal.error
    assert "terminal turn" in proposal.error
    assert proposal.rounds == 4 and backend.remaining == 0


def test_zero_corrections_allowed():
    proposal, _ = propose(answer(4, 4), answer(1, 2), max_corrections=0)
    assert not proposal.valid and "after 0 corrections" in proposal.error


@pytest.mark.parametrize("reply, message", [
    (Fail(500, "boom"), "HTTP 500: boom"),
    (Fail(429, "slow down"), "HTTP 429"),
    (Fail(200, body="<html>not an API</html>"), "did not answer a chat completion"),
    (Fail(200, body="{bad", content_type="application/json"), "unreadable body"),
    (Fail(200, body='{"id": "x"}'), "no choices"),
    (Fail(200, body='{"choices": [{"message": {"content": 7}}]}'), "bad message content"),
    (Text("late", delay_s=0.5), "timed out after 0.2 s"),
])
def test_endpoint_failures_are_no_credit(reply, message):
    # only the late reply needs a short timeout; the others get time to spare on a busy machine
    late = isinstance(reply, Text)
    proposal, _ = propose(reply, timeout_s=0.2 if late else 10.0)
    assert not proposal.valid and message in proposal.error
    assert proposal.rounds == 1


def test_failure_after_tool_calls_keeps_the_accounting():
    proposal, backend = propose(Calls((Call("search_trajectory", {"query": "key", "k": 2}),)),
                                Fail(500))
    assert not proposal.valid and "HTTP 500" in proposal.error
    assert (proposal.rounds, proposal.tool_calls) == (2, 1)
    assert proposal.prompt_tokens == backend.sent[0].prompt_tokens


def test_wall_time_cap_bounds_the_proposal():
    # The first reply takes 0.3 s of the 0.5 s cap, so the second request times out at 0.2 s.
    segment = Call("get_segment", {"traj_id": 0, "start_turn": 0, "end_turn": 1})
    late = dataclasses.replace(answer(1, 2), delay_s=0.5)
    proposal, _ = propose(Calls((segment,), delay_s=0.3), late, max_wall_s=0.5)
    assert not proposal.valid and "timed out" in proposal.error
    assert 0.5 <= proposal.wall_s < 1.5


@contextlib.contextmanager
def dripping_endpoint(byte_every_s=0.1):
    """A loopback endpoint that answers every request with headers, then one byte of its body
    every `byte_every_s` seconds, until the client hangs up."""
    import socket
    import threading
    import time

    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(65536)
                try:
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                       b"Content-Length: 100000\r\n\r\n")
                    while not stop.is_set():
                        connection.sendall(b" ")
                        time.sleep(byte_every_s)
                except OSError:  # the client hung up
                    pass

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join()
        server.close()


def test_a_dripping_endpoint_is_cut_at_the_deadline():
    # every read gets a byte well within the timeout, so only a whole-call deadline stops it
    with dripping_endpoint() as base_url:
        llm = LLM(LLMConfig(base_url=base_url, model="m", timeout_s=0.5, max_retries=3))
        session = Session(llm, max_wall_s=0.8)
        with pytest.raises(LLMError, match=r"timed out after 0\.5 s"):
            session.chat([{"role": "user", "content": "x"}])
        assert session.wall_s < 3.0  # before, it read until the endpoint stopped
        judge = AgenticJudge(AgenticConfig(base_url=base_url, model="m", timeout_s=0.5,
                                           max_wall_s=1.0))
        proposal = judge.propose(SUCCESS, FAILURES, RNG)
        assert not proposal.valid and "timed out" in proposal.error and proposal.wall_s < 3.0


def test_server_errors_are_retried_within_the_deadline_and_mark_the_judge_unreachable():
    proposal, backend = propose(Fail(500, "boom"), Fail(503), answer(1, 2), max_retries=2)
    assert proposal.valid and backend.remaining == 0
    proposal, _ = propose(Fail(500, "boom"), answer(1, 2), max_retries=0)
    assert not proposal.valid and "HTTP 500: boom" in proposal.error and proposal.unreachable
    proposal, backend = propose(Fail(400, "bad request"), answer(1, 2), max_retries=2)
    assert not proposal.valid and "HTTP 400" in proposal.error and backend.remaining == 1
    assert not proposal.unreachable  # the model answered; the judge is not down
    dead = AgenticJudge(AgenticConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    proposal = dead.propose(SUCCESS, FAILURES, RNG)
    assert not proposal.valid and proposal.unreachable


def test_a_spent_wall_time_cap_stops_before_calling():
    session = Session(LLM(LLMConfig(base_url="http://127.0.0.1:9/v1", model="m")), 0.0)
    with pytest.raises(LLMError, match="wall-time cap of 0 s"):
        session.chat([{"role": "user", "content": "x"}])
    assert session.rounds == 0


def test_exceeding_max_tool_calls_is_no_credit():
    search = Call("search_trajectory", {"query": "key", "k": 1})
    proposal, backend = propose(Calls((search,)), Calls((search, search)), answer(1, 2),
                                max_tool_calls=2)
    assert not proposal.valid and "3 tool calls; max_tool_calls is 2" in proposal.error
    assert (proposal.rounds, proposal.tool_calls) == (2, 3) and backend.remaining == 1


def test_search_trajectory_round_trip():
    proposal, backend = propose(
        Calls((Call("search_trajectory", {"query": "shelf", "k": 3}),
               Call("search_trajectory", {"query": "lamp", "k": 3}))), answer(1, 2))
    assert proposal.valid and proposal.tool_calls == 2
    shelf, lamp = backend.requests[1].messages[-2:]
    assert shelf["role"] == "tool" and shelf["tool_call_id"] == "call_0"
    # Only turns sharing a term match; the shorter document (go, shelf, obs) ranks first.
    assert json.loads(shelf["content"]) == [
        {"traj_id": 1, "turn": 0, "preview": "action: go to shelf 1 | observation before it: "
                                             "obs 0"},
        {"traj_id": 1, "turn": 1, "preview": "action: take key 1 from shelf 1 [invalid] | "
                                             "observation before it: obs 1"}]
    (hit,) = json.loads(lamp["content"])  # observations are searched too
    assert (hit["traj_id"], hit["turn"]) == (0, 1)


def test_search_results_are_bounded():
    long_obs = "key " * 400
    failure = view(["take key"] * 12, id=0, observations=[long_obs] * 12)
    with agentic(Calls((Call("search_trajectory", {"query": "key", "k": 10}),)),
                 answer(1, 2)) as (judge, backend):
        judge.propose(SUCCESS, [failure], RNG)
    hits = json.loads(backend.requests[1].messages[-1]["content"])
    assert [h["turn"] for h in hits] == list(range(10))  # equal scores: document order
    assert all(len(h["preview"]) <= 300 for h in hits)


def test_get_segment_round_trip_returns_the_range_with_its_context():
    proposal, backend = propose(
        Calls((Call("get_segment", {"traj_id": 0, "start_turn": 1, "end_turn": 2}),
               Call("get_segment", {"traj_id": 2, "start_turn": 4, "end_turn": 4}))),
        answer(1, 2))
    assert proposal.valid and proposal.tool_calls == 2
    first, second = backend.requests[1].messages[-2:]
    assert first["tool_call_id"] == "call_0" and second["tool_call_id"] == "call_1"
    assert first["content"] == (
        "trajectory 0 (reward 0, 4 turns), turns 1..2\n"
        "[turn 1] observation: You arrive at desk 1. On the desk 1, you see a lamp 1.\n"
        "[turn 1] action: take key 1 from desk 1 [invalid]\n"
        "[turn 2] observation: Nothing happens.\n"
        "[turn 2] action: look")
    assert second["content"].endswith("[turn 4] action: use key 1")


@pytest.mark.parametrize("call, message", [
    (Call("get_segment", "{not json"), "not valid JSON"),
    (Call("get_segment", "[" * 1000 + "]" * 1000), "nested too deeply"),
    (Call("get_segment", '{"traj_id": ' + "[" * 40 + "]" * 40 + "}"), "more than 32 levels"),
    (Call("get_segment", "[1]"), "JSON object"),
    (Call("get_segment", {"traj_id": 7, "start_turn": 0, "end_turn": 0}), "unknown traj_id 7"),
    (Call("get_segment", {"traj_id": 0, "start_turn": 2, "end_turn": 9}), "end_turn <= 3"),
    (Call("get_segment", {"traj_id": "0", "start_turn": 0, "end_turn": 0}), "'traj_id' must"),
    (Call("search_trajectory", {"query": "key", "k": 0}), "k must be in 1..10"),
    (Call("search_trajectory", {"k": 2}), "'query' must be a str"),
    (Call("open_door", {}), "unknown tool 'open_door'"),
])
def test_bad_tool_calls_are_answered_with_an_error_and_the_judge_goes_on(call, message):
    proposal, backend = propose(Calls((call,)), answer(1, 2))
    assert proposal.valid and proposal.tool_calls == 1
    content = backend.requests[1].messages[-1]["content"]
    assert content.startswith("error: ") and message in content


def test_token_and_cost_accounting_adds_up():
    proposal, backend = propose(
        Calls((Call("search_trajectory", {"query": "drawer", "k": 3}),)), Text("no idea"),
        answer(1, 2), prompt_token_price=0.001, completion_token_price=0.01)
    prompt = sum(r.prompt_tokens for r in backend.sent)
    completion = sum(r.completion_tokens for r in backend.sent)
    assert prompt > 0 and completion > 0
    assert (proposal.prompt_tokens, proposal.completion_tokens) == (prompt, completion)
    assert proposal.cost == pytest.approx(prompt * 0.001 + completion * 0.01)
    assert (proposal.rounds, proposal.tool_calls) == (3, 1)
    assert proposal.wall_s > 0


def test_configuration_errors_raise_at_construction(monkeypatch):
    for var in ("PROVER_JUDGE_BASE_URL", "PROVER_JUDGE_MODEL", "PROVER_JUDGE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match=r"no LLM base_url.*PROVER_JUDGE_BASE_URL"):
        judges.make("agentic", model="m")
    with pytest.raises(ValueError, match="no LLM model"):
        judges.make("agentic", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="max_tool_calls must be positive"):
        judges.make("agentic", base_url="http://127.0.0.1:9/v1", model="m", max_tool_calls=0)
    with pytest.raises(TypeError):
        judges.make("agentic", base_url="http://127.0.0.1:9/v1", model="m", nonsense=1)


def test_endpoint_from_environment_variables(monkeypatch):
    backend = ScriptedBackend([answer(1, 2)], model="env-judge")
    with serve(backend) as base_url:
        monkeypatch.setenv("PROVER_JUDGE_BASE_URL", base_url)
        monkeypatch.setenv("PROVER_JUDGE_MODEL", "env-judge")
        monkeypatch.setenv("PROVER_JUDGE_API_KEY", "secret-key")
        proposal = judges.make("agentic").propose(SUCCESS, FAILURES, RNG)
    assert proposal.valid and backend.requests[0].model == "env-judge"


# --------------------------------------------------- hidden state never leaves the environment


def rollout(env, task, choose, max_turns):
    """(TrajectoryView turns, reward, final state) of one episode of `env`."""
    observation = env.reset(task)
    first, turns, reward = observation, [], 0.0
    for t in range(max_turns):
        action = choose(env)
        step = env.step(action)
        turns.append(Turn(t, observation, action, step.info["valid"]))
        observation, reward = step.obs, step.reward
        if step.done:
            break
    return first, tuple(turns), reward, env.snapshot()


def test_no_hidden_household_state_reaches_the_llm():
    env = envs.make("household")
    task = envs.Task("household", "train", 3)
    rng = random.Random(1)
    episodes = [rollout(env, task, lambda e: e.expert_action(), 50)]
    episodes += [rollout(env, task, lambda e: e.random_action(rng), 6) for _ in range(3)]
    group = [TrajectoryView(i, first, turns, reward)
             for i, (first, turns, reward, _) in enumerate(episodes)]
    assert group[0].reward == 1.0 and all(v.reward == 0.0 for v in group[1:])
    world = env.world
    revealed = 0
    for *_, state in episodes:
        revealed |= state.seen | state.taken
    hidden = [name for o, name in enumerate(world.objects) if not revealed >> o & 1]
    assert hidden, "the test needs objects the policy never saw"

    get = [Call("get_segment", {"traj_id": v.id, "start_turn": 0,
                                "end_turn": len(v.turns) - 1}) for v in group]
    search = Call("search_trajectory", {"query": "take go open put", "k": 10})
    labels = [Text(json.dumps({"labels": {str(t.index): "good" for t in v.turns if t.valid}}))
              for v in group]
    backend = ScriptedBackend([Calls(tuple(get[:2])), Calls((search, *get[2:])),
                               answer(0, 0), *labels])
    with serve(backend) as base_url:
        config = {"base_url": base_url, "model": "scripted"}
        proposal = AgenticJudge(AgenticConfig(**config)).propose(group[0], group[1:], rng)
        critic = Critic(CriticConfig(**config)).label_group(group)
    assert proposal.valid and critic.labelled.all() and backend.remaining == 0
    sent = "\n".join(json.dumps(r.body) for r in backend.requests)
    assert group[1].turns[-1].action in sent  # the failures' text did reach the judge
    leaked = [name for name in hidden if re.search(rf"\b{name}\b", sent)]
    assert not leaked, f"hidden objects reached the LLM: {leaked}"


# ------------------------------------------------------------------------------ random judge


def test_random_judge_is_uniform_over_start_and_length():
    # T = 12: 12 starts x 4 lengths = 48 equally likely draws; those ending after T - 2 = 10
    # (start + length > 11: 1 + 2 + 3 + 4 = 10 of them) are discarded as no credit.
    trajectory = view([f"a{t}" for t in range(12)])
    judge, rng, n = RandomJudge(), random.Random(7), 4800
    proposals = [judge.propose(trajectory, [], rng) for _ in range(n)]
    counts = collections.Counter((p.start_turn, p.end_turn - p.start_turn + 1)
                                 for p in proposals if p.valid)
    assert len(counts) == 48 - 10
    assert all(60 <= c <= 140 for c in counts.values())  # 100 expected, sd ~10
    invalid = [p for p in proposals if not p.valid]
    assert abs(len(invalid) / n - 10 / 48) < 0.03
    assert all("terminal turn" in p.error or "out of range" in p.error for p in invalid)
    assert all(p.start_turn is None and p.end_turn is None for p in invalid)


def test_random_judge_discards_segments_with_invalid_actions():
    trajectory = view(list("abcdef"), [True, True, False, True, True, True])
    rng = random.Random(3)
    proposals = [RandomJudge().propose(trajectory, [], rng) for _ in range(400)]
    assert any("rejected" in (p.error or "") for p in proposals)
    assert all(not p.start_turn <= 2 <= p.end_turn for p in proposals if p.valid)


# ------------------------------------------------------------------------- contrastive judge


def contrastive(success, failures):
    proposal = ContrastiveJudge().propose(success, failures, RNG)
    return proposal.start_turn, proposal.end_turn


def test_contrastive_picks_the_run_of_success_only_actions():
    failures = [view(["go to desk 1", "look", "use key 1"]), view(["Go to  Desk 1", "look"])]
    success = view(["go to desk 1", "open drawer 1", "take key 1", "look", "use key 1"])
    # turns 1, 2 occur in no failure (novel 2); "go to desk 1" normalises onto the failures'.
    assert contrastive(success, failures) == (1, 2)


def test_contrastive_without_novel_actions_picks_the_rarest():
    failures = [view(["a", "b", "c"]), view(["a", "c"])]
    # rarity: a 0, b 1/2, c 0 -> the single turn 1.
    assert contrastive(view(["a", "b", "c", "a"]), failures) == (1, 1)


def test_contrastive_ties_go_to_the_shorter_then_earlier_segment():
    failures = [view(["a"]), view(["a"]), view(["b"])]
    # "a" is in 2 of 3 failures: rarity 1/3 at turns 0 and 1 alike, so [0, 0] ties [0, 1]
    # and [1, 1] exactly; the shorter, then earlier one wins.
    assert contrastive(view(["a", "a", "b"]), failures) == (0, 0)
    # all novel: the 4-turn windows [0, 3] and [1, 4] tie; the earlier wins.
    assert contrastive(view(list("uvwxyz")), failures) == (0, 3)


def test_contrastive_scores_only_valid_segments():
    success = view(["a", "x", "y", "a", "z"], [True, False, True, True, True])
    scores = segment_scores(success, [view(["a"])])
    assert all(not l <= 1 <= r for l, r in scores)  # turn 1 was rejected
    assert all(r <= 3 for _, r in scores)  # nonterminal
    assert scores[(2, 2)] == (1, 1)
    assert contrastive(success, [view(["a"])]) == (2, 2)


def test_contrastive_without_a_valid_segment_is_no_credit():
    proposal = ContrastiveJudge().propose(view(["a"]), [view(["b"])], RNG)
    assert not proposal.valid and "no valid segment" in proposal.error


# -------------------------------------------------------------------------------- registry


def test_registry():
    assert {"agentic", "random", "contrastive", "oracle", "verifier"} <= set(judges.names())
    assert isinstance(judges.make("random", max_segment_turns=2), RandomJudge)
    assert isinstance(judges.make("contrastive"), ContrastiveJudge)
    assert judges.make("verifier").reads_states  # VICT's plug-in, by its entry point
    with pytest.raises(ValueError, match=r"unknown judge 'orakel'; known: .*contrastive"):
        judges.make("orakel")
    with pytest.raises(ValueError, match="already registered"):
        judges.register("random", RandomJudge)
    with pytest.raises(ValueError, match="max_segment_turns must be >= 1"):
        judges.make("random", max_segment_turns=0)
