"""CriticSearch's critic: labels over real HTTP, whole-group fallback, the credit kernel."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

from prover_jax import credit
from prover_jax.judges import Critic, CriticConfig
from prover_jax.server import Fail, ScriptedBackend, Text, serve
from tests.prover_jax.test_judges import view

GROUP = (
    view(["search a", "search b", "answer x"], [True, False, True], 1.0, id=0),
    view(["search c", "answer y"], reward=0.0, id=1),
    view(["oops"], [False], 0.0, id=2),  # nothing scorable: no request
    view(["search d", "search e", "search f", "answer z"], reward=0.0, id=3),
)


def labels(**turns):
    return Text(json.dumps({"labels": {k.lstrip("t"): v for k, v in turns.items()}}))


GOOD = (labels(t0="good", t2="bad"), labels(t0="bad", t1="good"),
        labels(t0="good", t1="good", t2="bad", t3="good"))


@contextlib.contextmanager
def critic(*replies, **config):
    backend = ScriptedBackend(replies)
    with serve(backend) as base_url:
        yield Critic(CriticConfig(base_url=base_url, model="scripted", **config)), backend


def test_labels_every_scorable_turn_one_request_per_trajectory():
    with critic(*GOOD) as (judge, backend):
        result = judge.label_group(GROUP, num_turns=6)
    assert result.error is None
    assert result.labels.dtype == np.int32 and result.labels.shape == (4, 6)
    np.testing.assert_array_equal(result.labels, [
        [1, 0, -1, 0, 0, 0],  # turn 1 was invalid: not scored
        [-1, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0],
        [1, 1, -1, 1, 0, 0],
    ])
    np.testing.assert_array_equal(result.labelled, [True] * 4)
    assert result.rounds == 3 and backend.remaining == 0
    prompt = backend.requests[0].messages[-1]["content"]
    assert "Label these turns: [0, 2]" in prompt and "Final reward: 1" in prompt
    assert "[turn 1] action: search b [invalid]" in prompt
    assert "Reference answer" not in prompt


def test_num_turns_defaults_to_the_longest_and_must_fit():
    with critic(*GOOD) as (judge, _):
        assert judge.label_group(GROUP).labels.shape == (4, 4)
        with pytest.raises(ValueError, match="num_turns=3 is shorter"):
            judge.label_group(GROUP, num_turns=3)


def test_reference_answer_and_custom_scorable_turns():
    def searches(turn):
        return turn.valid and turn.action.startswith("search")

    with critic(labels(t0="good"), labels(t0="bad"), labels(t0="good", t1="bad", t2="good")
                ) as (judge, backend):
        result = judge.label_group(GROUP, reference="Paris", scorable=searches)
    assert result.error is None
    np.testing.assert_array_equal(result.labels[:, :4], [[1, 0, 0, 0], [-1, 0, 0, 0],
                                                         [0, 0, 0, 0], [1, -1, 1, 0]])
    assert "Reference answer: Paris" in backend.requests[0].messages[-1]["content"]


@pytest.mark.parametrize("bad, message", [
    (Text("all good"), "no JSON object"),
    (Text('{"labels": ["good", "good"]}'), '"labels" object'),
    (labels(t0="good"), "expected exactly ['0', '1']"),
    (labels(t0="good", t1="good", t5="bad"), "expected exactly"),
    (labels(t0="good", t1="neutral"), "must be \"good\" or \"bad\""),
    (labels(t0="good", t1=1), "must be \"good\" or \"bad\""),
    (Fail(500, "critic down"), "HTTP 500: critic down"),
    (Fail(200, body="garbage"), "did not answer a chat completion"),
    (Text("late", delay_s=0.5), "timed out"),
])
def test_invalid_critic_output_unlabels_the_whole_group(bad, message):
    with critic(GOOD[0], bad, *GOOD[2:], timeout_s=0.2) as (judge, backend):
        result = judge.label_group(GROUP, num_turns=5)
    assert result.error.startswith("trajectory 1: ") and message in result.error
    assert not result.labelled.any() and not result.labels.any()
    assert result.labels.shape == (4, 5)
    assert result.rounds == 2 and backend.remaining == 1  # the rest is not sent


def test_usage_and_cost_add_up():
    with critic(*GOOD, prompt_token_price=2e-6, completion_token_price=8e-6) as (judge, backend):
        result = judge.label_group(GROUP)
    prompt = sum(r.prompt_tokens for r in backend.sent)
    completion = sum(r.completion_tokens for r in backend.sent)
    assert (result.prompt_tokens, result.completion_tokens) == (prompt, completion)
    assert result.cost == pytest.approx(2e-6 * prompt + 8e-6 * completion)
    assert result.wall_s > 0


def test_labels_feed_the_criticsearch_kernel_and_a_failed_group_falls_back():
    with critic(*GOOD, Fail(500)) as (judge, _):
        good = judge.label_group(GROUP, num_turns=4)
        failed = judge.label_group(GROUP[:2], num_turns=4)
    labels = np.concatenate([good.labels, failed.labels])
    labelled = np.concatenate([good.labelled, failed.labelled])
    group_ids = np.array([0, 0, 0, 0, 1, 1], np.int32)
    turn_valid = np.array([[t < n for t in range(4)] for n in (3, 2, 1, 4, 3, 2)])
    base = np.array([0.75, -0.25, -0.25, -0.25, 0.5, -0.5], np.float32)
    out = np.asarray(credit.criticsearch(base, group_ids, turn_valid, labels, labelled))
    # Row 0: 0.75 * 0.75 + 0.25 * (+1) = 0.8125 on turn 0; turn 1 unscored keeps GRPO 0.75.
    np.testing.assert_allclose(out[0, :3], [0.8125, 0.75, 0.75 * 0.75 - 0.25])
    np.testing.assert_allclose(out[4:], [[0.5, 0.5, 0.5, 0], [-0.5, -0.5, 0, 0]])
