"""AgentGym's server protocols (`envs.agentgym`) against stand-in servers on 127.0.0.1 backed
by the project's environments: the same episodes as played directly, restore by replay, and
every failure a server can have (errors, 5xx, slow replies, garbage, a closed port, death in
the middle of an episode)."""

from __future__ import annotations

import asyncio
import random

import pytest
from starlette.responses import PlainTextResponse, Response

import envs
from envs.agentgym import ServerError
from envs.agentgym.env import URL_VARIABLE
from envs.agentgym.standin import BACKING, create_app
from envs.agentgym.transport import Transport
from prover_jax.server.runner import serve_app

FAST = {"timeout": 5.0, "retries": 2, "backoff": 0.01}


class Faults:
    """An ASGI wrapper that answers the next requests with the planned faults."""

    def __init__(self, app):
        self.app, self.plan, self.requests = app, [], []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.requests.append(scope["path"])
            fault = self.plan.pop(0) if self.plan else None
            if fault == "slow":
                await asyncio.sleep(1.0)
            elif fault is not None:
                status, body = {"503": (503, b"busy"), "500": (500, b"Internal Server Error"),
                                "garbage": (200, b"<html>oops")}[fault]
                response = (PlainTextResponse(body.decode(), status) if status != 200
                            else Response(body, 200, media_type="text/html"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


@pytest.fixture(scope="module", params=sorted(BACKING))
def server(request):
    """(protocol, faulty stand-in app, base URL) of each protocol's stand-in server."""
    if request.param == "alfworld":
        pytest.importorskip("alfworld", reason="the ALFWorld stand-in plays alfworld-small")
    app = Faults(create_app(request.param))
    with serve_app(app, name=f"agentgym-{request.param}") as url:
        yield request.param, app, url


def _client(protocol: str, url: str, **options) -> envs.Env:
    return envs.make(f"agentgym-{protocol}", url=url, **{**FAST, **options})


def _actions(env: envs.Env, rng: random.Random, n: int) -> list[str]:
    """Up to ``n`` actions of an episode of the backing environment from its current state:
    its expert's, one in three random where it lists actions; the state is kept."""
    state, actions = env.snapshot(), []
    for _ in range(n):
        random_one = env.admissible() is not None and rng.random() < 0.3
        actions.append(env.random_action(rng) if random_one else env.expert_action())
        if env.step(actions[-1]).done:
            break
    env.restore(state)
    return actions


def _play(env: envs.Env, actions: list[str]) -> list[tuple]:
    out = []
    for action in actions:
        step = env.step(action)
        out.append((step.obs, step.reward, step.done, step.info["valid"],
                    None if step.done else env.admissible()))
        if step.done:
            break
    return out


def test_episodes_through_the_server_are_the_episodes_played_directly(server):
    protocol, _, url = server
    direct, client, rng = envs.make(BACKING[protocol]), _client(protocol, url), random.Random(0)
    for split in client.splits:
        task = client.tasks(split)[1]
        backing_task = envs.Task(direct.name, split, task.index)
        intro = direct.reset(backing_task)
        expected_intro = "\n".join(intro.split("\n\n")[1:]) if protocol == "alfworld" else intro
        assert client.reset(task) == expected_intro
        assert client.admissible() == direct.admissible()
        actions = _actions(direct, rng, client.max_turns)
        played = _play(direct, actions)
        assert _play(client, actions) == played
        assert client.snapshot().actions == tuple(actions)


def test_restore_replays_onward_or_from_a_reset(server):
    protocol, app, url = server
    direct, rng = envs.make(BACKING[protocol]), random.Random(1)
    task = envs.Task(f"agentgym-{protocol}", "train", 2)
    direct.reset(envs.Task(direct.name, "train", 2))
    actions = _actions(direct, rng, 6)
    client = _client(protocol, url)
    client.reset(task)
    before = _play(client, actions[:3])
    if before[-1][2]:
        pytest.skip("the episode ended within three actions")
    state = client.snapshot()
    after = _play(client, actions[3:])
    for restored in (client, _client(protocol, url)):
        app.requests.clear()
        restored.restore(state)
        assert _play(restored, actions[3:]) == after
        assert app.requests.count("/reset") == 1  # from a reset: one; replayed all of it
    client.restore(state)
    app.requests.clear()
    prefix = client.snapshot()
    client.step(actions[3])
    client.restore(prefix._replace(actions=prefix.actions + (actions[3],), done=False))
    assert "/reset" not in app.requests  # onward: the server's episode was a prefix


def test_invalid_actions_are_the_benchmarks_feedback(server):
    protocol, _, url = server
    client = _client(protocol, url)
    client.reset(client.tasks("eval")[0])
    for action in ("asdf", "", "go to nowhere 9", "click[no such button]"):
        step = client.step(action)
        assert isinstance(step.obs, str) and step.info["valid"] is False, action
        assert step.reward == 0.0


def test_transient_failures_are_retried(server):
    protocol, app, url = server
    client = _client(protocol, url)
    app.plan[:] = ["503", "500"]
    client.reset(client.tasks("train")[0])  # the third try of the first request succeeds
    assert not app.plan


def test_failures_name_the_request_and_nothing_hangs(server):
    protocol, app, url = server
    client = _client(protocol, url, retries=1, timeout=0.3)
    task = client.tasks("train")[0]
    app.plan[:] = ["500", "500"]
    with pytest.raises(ServerError, match=r"POST .*/create: HTTP 500.*after 2 tries"):
        client.reset(task)
    app.plan[:] = ["garbage"]
    with pytest.raises(ServerError, match="not JSON: <html>oops"):
        client.reset(task)
    app.plan[:] = ["slow", "slow"]
    with pytest.raises(ServerError, match="timed out"):
        client.reset(task)
    app.plan.clear()


def test_the_servers_own_errors_are_clear(server):
    protocol, _, url = server
    transport = Transport(url, **FAST)
    if protocol == "alfworld":  # HTTP 200 with an error field
        with pytest.raises(ServerError, match="the server says: The id 999 is not valid"):
            transport.post("step", {"id": 999, "action": "look"})
    else:
        with pytest.raises(ServerError, match="HTTP 500"):
            transport.post("step", {"env_idx": 999_999_999, "action": "look"})
    client = _client(protocol, url)
    with pytest.raises(ValueError, match="out of range"):
        client.reset(envs.Task(client.name, "eval", 10**7))


def test_a_server_that_dies_mid_episode_ends_the_episode_with_its_error():
    pytest.importorskip("alfworld")
    with serve_app(create_app("alfworld")) as url:
        client = _client("alfworld", url, retries=1)
        client.reset(client.tasks("train")[0])
        client.step("look")
    step = client.step("look")  # the server is gone: connection refused
    assert step.done and step.reward == 0.0 and step.info["truncated"]
    assert url in step.info["error"] and "after 2 tries" in step.info["error"]
    assert client.snapshot().done
    with pytest.raises(ServerError, match=url):
        client.reset(client.tasks("train")[0])


def test_a_closed_port_and_bad_configuration_are_clear_errors(monkeypatch):
    monkeypatch.delenv(URL_VARIABLE, raising=False)
    with pytest.raises(ValueError, match=r"\$AGENTGYM_URL"):
        envs.make("agentgym-webshop")
    with pytest.raises(ValueError, match="not an http"):
        envs.make("agentgym-webshop", url="localhost:36001")
    monkeypatch.setenv(URL_VARIABLE, "http://127.0.0.1:9")  # discard port: nothing listens
    client = envs.make("agentgym-searchqa", retries=0)
    with pytest.raises(ServerError, match=r"127\.0\.0\.1:9/create.*(refused|Connection)"):
        client.reset(client.tasks("eval")[0])
    with pytest.raises(NotImplementedError, match="no expert"):
        client.expert_action()
    with pytest.raises(NotImplementedError, match="VICT"):
        client.verifier()


def test_a_pool_of_clients_plays_on_when_the_server_dies():
    """Episodes in worker processes: the server stops after a few actions; every episode
    then ends (truncated, reward 0) and the rollout returns."""
    from envs.pool import EnvPool
    from prover_jax import rollout

    pytest.importorskip("alfworld")
    with serve_app(create_app("alfworld")) as url:
        pool = EnvPool("agentgym-alfworld", 2, 1, config={"url": url, "retries": 1,
                                                           "backoff": 0.01})
        tasks = envs.make("agentgym-alfworld", url=url).tasks("train")[:2]
        started = rollout.run(pool, rollout.ScriptedPolicy(1.0), [rollout.start(t) for t in tasks],
                              random.Random(0), max_actions=3)
    try:
        finished = rollout.run(pool, rollout.ScriptedPolicy(1.0), started, random.Random(1))
    finally:
        pool.close()
    assert [e.num_turns for e in started] == [3, 3]
    assert all(e.done and e.truncated and e.reward == 0.0 for e in finished)
    assert [e.num_turns for e in finished] == [4, 4]


def test_concurrent_clients_get_their_own_episodes(server):
    """Four clients at once (as a pool's workers are) play what each plays alone."""
    from concurrent.futures import ThreadPoolExecutor

    protocol, _, url = server
    actions = {"alfworld": ["look", "inventory", "go to cabinet 1"],
               "webshop": ["search[shoes]", "click[< prev]", "search[shirt]"],
               "searchqa": ["<search>river</search>", "<search>city</search>", "x"]}[protocol]

    def episode(index: int) -> list[tuple]:
        client = _client(protocol, url)
        client.reset(client.tasks("train")[index])
        return _play(client, actions)

    alone = [episode(i) for i in range(4)]
    with ThreadPoolExecutor(4) as threads:
        assert list(threads.map(episode, range(4))) == alone


def test_expert_work_is_refused_where_the_server_has_no_expert(monkeypatch, capsys):
    from prover_jax import evaluate, sft

    monkeypatch.setenv(URL_VARIABLE, "http://127.0.0.1:9")
    for main, args in ((evaluate.main, ["--env", "agentgym-webshop", "--expert"]),
                       (sft.main, ["--env", "agentgym-webshop"])):
        with pytest.raises(SystemExit):
            main(args)
        assert "agentgym-webshop has no expert" in capsys.readouterr().err
