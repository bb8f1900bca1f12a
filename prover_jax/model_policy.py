"""A Qwen model as the rollout policy: token streams in, an ``act`` tool call out.

Every episode is one token stream (``Episode.stream``): the prompt (system, tools, task and
generation prompt, rendered with the checkpoint's chat template and tokenized once), then per
turn the reply exactly as sampled and the observation block that follows it
(`models.qwen.chat.AgentFormat`). Nothing is re-rendered or re-tokenized: what the learner
trains on is what the sampler read and wrote, and its log-probs are the learner's old ones.

The environment gets the reply's parsed action: the ``action`` argument of its first ``act``
tool call, or else the reply's text without thoughts (which the environment will usually
reject, as it should; the reply is still trained on as sampled).

The policy keeps one KV cache row per pool slot across turns. A row that already holds an
episode's stream prefills only the new context (the observation block); a row taking a new
episode, or a restored prefix (ProVer's and SPO's continuations), is emptied and prefills the
whole stream, once per distinct stream: the K continuations of one prefix, and the G episodes
of one task, share it. The cache holds the power of two of slots its rows need: it is compacted
and grown as they need more, and compacted and cut when ended episodes and padding leave it
larger (every decode step reads every slot). An episode whose stream would exceed
``max_context`` with a full reply is not continued: `run` ends it as truncated, with its
``overflow`` flag set.

Lengths are bucketed to powers of two, so a rollout compiles ``generate`` only a few times.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from envs.base import Task
from models.qwen import QwenConfig, chat, kv_cache
from models.qwen.chat import END_OF_TURN, AgentFormat
from models.qwen.sampler import generate, sampling_params
from prover_jax.batch import bucket
from prover_jax.rollout import PENDING, Action, Episode, Policy
from prover_jax.settings import ChatConfig, SamplingConfig
from tpu.mesh import AXES, BATCH_AXES, cache_shardings, row_sharding

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


def sampler_mesh(params) -> Mesh | None:
    """The `tpu.mesh` mesh the params are placed on (`tpu.mesh.to_sampler`), or None when they
    are on one device or another mesh."""
    sharding = getattr(jax.tree.leaves(params)[0], "sharding", None)
    if not isinstance(sharding, NamedSharding) or sharding.mesh.size == 1:
        return None
    return sharding.mesh if tuple(sharding.mesh.axis_names) == AXES else None


def parse_action(reply: str) -> str:
    """The ``action`` of the reply's first ``act`` tool call (in the JSON or the XML form,
    `chat.parse_call`), else its text without thoughts."""
    for block in chat.tool_call_blocks(reply):
        call = chat.parse_call(block)
        if call is None or call.name != "act" or not isinstance(call.arguments, dict):
            continue
        if isinstance(call.arguments.get("action"), str):
            return call.arguments["action"]
    return _THINK.sub("", reply).strip()


def next_context(agent_format: AgentFormat, episode: Episode) -> np.ndarray:
    """int32 [C] the tokens an episode's next reply reads after its stream so far: the prompt
    first, then the block after each reply (a prefix's recorded context, where it has one)."""
    if episode.next_context_ids:
        return np.asarray(episode.next_context_ids, np.int32)
    if not episode.actions:
        return agent_format.prompt(episode.observations[0])
    return agent_format.after_reply(episode.actions[-1].token_ids, episode.observations[-1])


def stream_ids(episode: Episode) -> np.ndarray:
    """int32 [L] the episode's token stream through its last reply ([0] without actions)."""
    if not episode.actions:
        return np.zeros(0, np.int32)
    return episode.stream().tokens


def stream_keys(rows: int, streams: dict[int, random.Random]) -> jax.Array:
    """A key array [rows] for `generate`: row r's key drawn from ``streams[r]`` (64 random
    bits), a fixed key for rows without a stream."""
    data = np.zeros((rows, 2), np.uint32)
    for row, stream in streams.items():
        data[row] = divmod(stream.getrandbits(64), 1 << 32)
    return jax.random.wrap_key_data(jnp.asarray(data), impl="threefry2x32")


@dataclasses.dataclass(frozen=True)
class _Held:
    """What one cache row holds: an episode's stream through the reply of its last action."""

    task: Task
    actions: tuple[Action, ...]
    length: int  # tokens of the stream

    def holds(self, episode: Episode) -> bool:
        return same_episode(self.task, self.actions, episode)


def same_episode(task: Task, actions: tuple[Action, ...], episode: Episode) -> bool:
    """Whether `episode` is the one of `task` through exactly these `actions` (the same
    objects: a stream is held only by the episode that sampled it)."""
    return (task == episode.task and len(actions) == len(episode.actions)
            and all(a is b for a, b in zip(actions, episode.actions)))


@dataclasses.dataclass
class _Decoding:
    """A row of a continuously decoding policy: the episode whose stream it holds (through
    its last reply, or its prompt) and the reply being decoded, if one is."""

    task: Task
    actions: tuple[Action, ...]
    written: int  # stream tokens in the cache; the next one, `pending`, is not yet
    pending: int  # the token the next call feeds (at position `written`)
    context: np.ndarray  # int32 [C] what the current (or last) reply read after the stream
    key: np.ndarray | None = None  # uint32 [2] the reply's key data; None: no reply running
    ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)

    def holds(self, episode: Episode) -> bool:
        return same_episode(self.task, self.actions, episode)


@dataclasses.dataclass
class RolloutStats:
    """Counters of a policy's work since it was made."""

    prefilled: int = 0  # real (unpadded) context tokens written to the cache
    generated: int = 0  # sampled tokens
    calls: int = 0  # `generate` calls
    overflows: int = 0  # episodes ended because their stream would exceed max_context
    # rows x decode steps of the `generate` calls (each runs every row of its batch until its
    # last row is done): `generated` over this is the share of the batch's slots that sampled
    row_steps: int = 0


class ModelPolicy(Policy):
    """Samples actions from a Qwen model (params on device, config, tokenizer).

    The params are laid out for sampling once, here (`sampling_params`: on CPU a per-layer
    copy of the weights), and the KV cache lives as long as the policy, so make one policy per
    weight update and drop it before training.

    Args:
      params, cfg: the model.
      tokenizer: a fast tokenizer with a ChatML chat template.
      system: the system prompt (the environment's instructions).
      sampling: SamplingConfig.
      chat: how the episode is written in the chat template (ChatConfig).

    Raises:
      ValueError: ``max_context`` beyond the model's ``max_position_embeddings``, or a
        tokenizer the stream cannot be cut from (see `AgentFormat`).
    """

    def __init__(self, params, cfg: QwenConfig, tokenizer, system: str,
                 sampling: SamplingConfig | None = None, chat: ChatConfig | None = None):
        self.sampling = sampling or SamplingConfig()
        self.params = sampling_params(
            jax.tree.map(lambda p: p.astype(self.sampling.dtype), params), cfg)
        self.mesh = sampler_mesh(params)
        self.cfg, self.tokenizer, self.system = cfg, tokenizer, system
        chat = chat or ChatConfig()
        self.format = AgentFormat(tokenizer, system, chat.reply, chat.template)
        self.max_context = self.sampling.max_context or cfg.max_position_embeddings
        if self.max_context > cfg.max_position_embeddings:
            raise ValueError(f"max_context={self.max_context} exceeds the model's "
                             f"max_position_embeddings={cfg.max_position_embeddings}")
        self.stop_tokens = jnp.array([self.format.end_of_turn], jnp.int32)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.format.end_of_turn
        self.stats = RolloutStats()
        self._cache: kv_cache.Cache | None = None
        self._held: list[_Held | None] = []
        # with `sampling.decode_chunk`: what each cache row holds, and each pool slot's row
        self._rows: list[_Decoding | None] = []
        self._row_of: dict[int, int] = {}

    @property
    def cache_slots(self) -> int:
        """Slots per row of the KV cache kept across turns (0 before the first call)."""
        return 0 if self._cache is None else int(self._cache.valid.shape[1])

    @property
    def cache_rows(self) -> int:
        """Rows of the KV cache (0 before the first call): one per pool slot, or with
        `sampling.decode_chunk` the power of two the episodes of the last call needed."""
        return 0 if self._cache is None else int(self._cache.valid.shape[0])

    def context(self, episode: Episode) -> np.ndarray:
        """int32 [C] the tokens the episode's next reply reads after its stream so far."""
        return next_context(self.format, episode)

    def prompt(self, episode: Episode) -> np.ndarray:
        """int32 [P] everything the episode's next reply is sampled after."""
        return np.concatenate([stream_ids(episode), self.context(episode)])

    def act(self, episodes: Sequence[Episode], slots, pool, rngs: Sequence[random.Random]
            ) -> list[Action | str | None]:
        if self.sampling.decode_chunk:
            return self._act_continuously(episodes, slots, rngs)
        rows = pool.num_slots
        if self._cache is None or len(self._held) != rows:
            self._cache, self._held = None, [None] * rows
        reuse = self.sampling.reuse_cache
        contexts = [self.context(e) for e in episodes]
        new, starts, acting = {}, {}, []
        for episode, slot, context in zip(episodes, slots, contexts):
            held = self._held[slot]
            if reuse and held is not None and held.holds(episode):
                new[slot], starts[slot] = context, held.length
            else:
                new[slot], starts[slot] = np.concatenate([stream_ids(episode), context]), 0
            self._held[slot] = None
            if starts[slot] + len(new[slot]) + self.sampling.max_new_tokens > self.max_context:
                self.stats.overflows += 1
                continue
            acting.append(slot)
        if not acting:
            return [None] * len(episodes)
        continued = {s for s in acting if starts[s] > 0}
        emptied = [row for row in range(rows) if row not in continued]
        for row in emptied:
            self._held[row] = None
        streams = dict(zip(slots, rngs))
        sampled = self._sample(rows, new, starts, emptied if reuse else [],
                               {row: streams[row] for row in acting})
        actions = []
        for episode, slot, context in zip(episodes, slots, contexts):
            if slot not in sampled:
                actions.append(None)
                continue
            ids, logprobs = sampled[slot]
            reply = self.tokenizer.decode(ids, skip_special_tokens=False)
            text = parse_action(reply.removesuffix(END_OF_TURN))
            action = Action(text, tuple(ids), tuple(logprobs), tuple(context.tolist()))
            actions.append(action)
            self._held[slot] = _Held(episode.task, episode.actions + (action,),
                                     starts[slot] + len(new[slot]) + len(ids))
        return actions

    def _sample(self, rows: int, new: dict, starts: dict, emptied: list[int],
                acting: dict[int, random.Random]) -> dict[int, tuple[list[int], list[float]]]:
        """Prefills and samples one reply per acting row, each with a key drawn from the row's
        own stream (`acting`: row -> stream); {row: (ids, logprobs)}.

        `emptied` rows are emptied; those acting start a stream and prefill all of it but its
        last token through `kv_cache.prefill_rows`, once per distinct stream. Every acting row
        then feeds `generate` its remaining new tokens (a fresh row's last token, or the new
        context).
        """
        s = self.sampling
        fresh = [row for row in emptied if row in acting]
        distinct: dict[tuple[int, ...], int] = {}
        for row in fresh:
            distinct.setdefault(tuple(new[row][:-1].tolist()), len(distinct))
        distinct.pop((), None)
        tails = {row: new[row][-1:] if row in fresh else new[row] for row in acting}
        tail_len = bucket(max(len(t) for t in tails.values()), s.min_prompt_tokens)
        head_len = bucket(max((len(d) for d in distinct), default=1), s.min_prompt_tokens)
        head_len = head_len if distinct else 0
        if s.reuse_cache:
            kept = max((starts[row] for row in acting if row not in fresh), default=0)
            self._make_room(rows, emptied, kept, head_len + tail_len + s.max_new_tokens)
        else:
            self._cache = self._empty_cache(rows, tail_len + s.max_new_tokens)
        if distinct:
            self._prefill_shared(rows, distinct, new, fresh, head_len)
        tokens = np.full((rows, tail_len), self.pad_id, np.int32)
        positions = np.full((rows, tail_len), -1, np.int32)
        for row, tail in tails.items():
            begin = starts[row] + len(new[row]) - len(tail)
            tokens[row, tail_len - len(tail):] = tail
            positions[row, tail_len - len(tail):] = np.arange(begin, begin + len(tail))
        self.stats.prefilled += sum(map(len, distinct)) + sum(map(len, tails.values()))
        tokens, positions, keys = self._placed((tokens, positions, stream_keys(rows, acting)))
        out = generate(self.params, self.cfg, tokens, positions, self._cache, keys,
                       max_tokens=s.max_new_tokens, max_new_tokens=jnp.int32(s.max_new_tokens),
                       stop_tokens=self.stop_tokens, temperature=jnp.float32(s.temperature),
                       top_k=jnp.int32(s.top_k), top_p=jnp.float32(s.top_p), pad_id=self.pad_id)
        self._cache = out.cache
        ids, logprobs, lengths = jax.device_get((out.tokens, out.logprobs, out.lengths))
        self._count_call(lengths)
        return {row: (ids[row, : lengths[row]].tolist(),
                      logprobs[row, : lengths[row]].tolist()) for row in acting}

    def _count_call(self, lengths: np.ndarray) -> None:
        """Counts one `generate` call that sampled `lengths` [rows] tokens per row."""
        self.stats.calls += 1
        self.stats.generated += int(lengths.sum())
        self.stats.row_steps += len(lengths) * int(lengths.max())

    def _act_continuously(self, episodes: Sequence[Episode], slots: Sequence[int],
                          rngs: Sequence[random.Random]) -> list[Action | str | None]:
        """`act` with `sampling.decode_chunk`: one call of `decode_chunk` tokens for every row.

        Each episode whose row has no reply running starts one first: a row that holds its
        stream through the last reply writes the new context after it (`kv_cache.extend_rows`,
        those rows alone); an episode new to the policy takes an empty row and prefills its
        whole stream (once per distinct stream, `kv_cache.prefill_rows`). Its key is drawn
        from the episode's stream then, once per reply, as `act` draws it, and every token of
        the reply is drawn with it at the token's place in the reply (`generate`'s
        `key_offsets`): so the reply is the one `act` samples, whatever the chunks. The
        episodes whose reply ended in this call get their action; the others `PENDING`.

        The cache has the power of two of rows its episodes need (`_fit_rows`), not one per
        pool slot: every decode step runs every row.
        """
        s = self.sampling
        kept = {slot: self._row_of[slot] for slot, episode in zip(slots, episodes)
                if slot in self._row_of and self._rows[self._row_of[slot]].holds(episode)}
        ended = [row for slot, row in self._row_of.items() if slot not in kept]
        for row in ended:
            self._rows[row] = None
        if ended and self._cache is not None:
            self._cache = kv_cache.reset_rows(self._cache, jnp.asarray(
                np.isin(np.arange(len(self._rows)), ended)))
        self._row_of = kept
        self._fit_rows(len(slots))
        free = (row for row, held in enumerate(self._rows) if held is None)
        for slot in slots:
            if slot not in self._row_of:
                self._row_of[slot] = next(free)
        fresh, extended, out, emptied = {}, {}, {}, []
        for episode, slot, rng in zip(episodes, slots, rngs):
            r = self._row_of[slot]
            row = self._rows[r]
            if row is not None and row.key is not None:
                continue  # its reply is being decoded
            context = self.context(episode)
            stream = row.written + 1 if row is not None else len(stream_ids(episode))
            if stream + len(context) + s.max_new_tokens > self.max_context:
                self.stats.overflows += 1
                self._rows[r], out[slot] = None, None
                del self._row_of[slot]
                emptied.append(r)
                continue
            if row is None:
                fresh[r] = np.concatenate([stream_ids(episode), context])
                row = _Decoding(episode.task, episode.actions, len(fresh[r]) - 1, 0, context)
            else:
                extended[r] = np.concatenate([[row.pending], context[:-1]]).astype(np.int32)
                row.written += len(context)
            row.pending, row.context = int(context[-1]), context
            row.key = np.array(divmod(rng.getrandbits(64), 1 << 32), np.uint32)
            row.ids, row.logprobs = [], []
            self._rows[r] = row
        self._start_replies(sorted({*emptied, *fresh}), fresh, extended)
        decoding = [row for row, held in enumerate(self._rows) if held is not None]
        if decoding:
            ended_replies = self._decode_chunk(decoding)
            out.update({slot: ended_replies[row] for slot, row in self._row_of.items()
                        if row in ended_replies})
        return [out.get(slot, PENDING) for slot in slots]

    def _fit_rows(self, needed: int) -> None:
        """Gives the cache the power of two of rows that `needed` episodes take: more rows
        (empty) when they do not fit, or the rows in use moved to the front of half as many or
        fewer when that holds them (`kv_cache.select_rows`)."""
        count, target = len(self._rows), bucket(needed)
        if self._cache is None:
            self._rows = [None] * target
            return
        if target > count:
            order = [*range(count), *[-1] * (target - count)]
        elif target <= count // 2:
            used = [row for row, held in enumerate(self._rows) if held is not None]
            order = [*used, *[-1] * (target - len(used))]
        else:
            return
        self._cache = self._on_mesh(kv_cache.select_rows(self._cache,
                                                         jnp.asarray(order, jnp.int32)))
        self._rows = [self._rows[row] if row >= 0 else None for row in order]
        moved = {row: i for i, row in enumerate(order) if row >= 0}
        self._row_of = {slot: moved[row] for slot, row in self._row_of.items()}

    def _start_replies(self, emptied: list[int], fresh: dict[int, np.ndarray],
                       extended: dict[int, np.ndarray]) -> None:
        """Empties the `emptied` rows (the `fresh` ones among them) and prefills the fresh
        streams but their last token; writes the `extended` rows' new tokens after what they
        hold; and makes room for the next call."""
        s, rows = self.sampling, len(self._rows)
        if self._cache is not None and emptied:
            self._cache = kv_cache.reset_rows(self._cache,
                                              jnp.asarray(np.isin(np.arange(rows), emptied)))
        distinct = {tuple(ids[:-1].tolist()): None for ids in fresh.values() if len(ids) > 1}
        distinct = {head: i for i, head in enumerate(distinct)}
        head_len = bucket(max(map(len, distinct)), s.min_prompt_tokens) if distinct else 0
        tail_len = (bucket(max(map(len, extended.values())), s.min_prompt_tokens)
                    if extended else 0)
        needed = head_len + tail_len + s.decode_chunk
        self._cache = (self._empty_cache(rows, bucket(needed)) if self._cache is None
                       else kv_cache.with_room(self._cache, needed, shrink=True))
        if distinct:
            self._prefill_shared(rows, distinct, fresh, list(fresh), head_len)
        if extended:  # a bucket of at most half the rows, or every row (`extend_rows`)
            count = bucket(len(extended))
            count = count if 2 * count <= rows else rows
            tokens = np.full((count, tail_len), self.pad_id, np.int32)
            positions = np.full((count, tail_len), -1, np.int32)
            targets = np.full(count, -1, np.int32)
            for i, (row, new) in enumerate(extended.items()):
                begin = self._rows[row].written - len(new)
                tokens[i, tail_len - len(new):] = new
                positions[i, tail_len - len(new):] = np.arange(begin, begin + len(new))
                targets[i] = row
            self._cache = kv_cache.extend_rows(self.params, self.cfg, self._cache,
                                               *self._placed((targets, tokens, positions)))
        self.stats.prefilled += (sum(map(len, distinct)) + len(fresh)
                                 + sum(map(len, extended.values())))

    def _decode_chunk(self, decoding: list[int]) -> dict[int, Action]:
        """One `generate` call of `decode_chunk` tokens for every row, the `decoding` ones
        each fed its pending token; {row: action} of the replies that ended."""
        s, rows = self.sampling, len(self._rows)
        tokens = np.full((rows, 1), self.pad_id, np.int32)
        positions = np.full((rows, 1), -1, np.int32)
        keys = np.zeros((rows, 2), np.uint32)
        offsets = np.zeros(rows, np.int32)
        budgets = np.ones(rows, np.int32)
        for r in decoding:
            row = self._rows[r]
            tokens[r, 0], positions[r, 0], keys[r] = row.pending, row.written, row.key
            offsets[r], budgets[r] = len(row.ids), s.max_new_tokens - len(row.ids)
        tokens, positions, offsets, budgets = self._placed((tokens, positions, offsets, budgets))
        keys = jax.random.wrap_key_data(jnp.asarray(keys), impl="threefry2x32")
        out = generate(self.params, self.cfg, tokens, positions, self._cache, keys,
                       max_tokens=s.decode_chunk, max_new_tokens=budgets,
                       stop_tokens=self.stop_tokens, temperature=np.float32(s.temperature),
                       top_k=np.int32(s.top_k), top_p=np.float32(s.top_p), pad_id=self.pad_id,
                       write_last=False, key_offsets=offsets)
        self._cache = out.cache
        ids, logprobs, lengths = jax.device_get((out.tokens, out.logprobs, out.lengths))
        self._count_call(lengths)
        ended = {}
        stop = int(self.format.end_of_turn)
        for r in decoding:
            row, n = self._rows[r], int(lengths[r])
            row.ids += ids[r, :n].tolist()
            row.logprobs += logprobs[r, :n].tolist()
            row.written, row.pending = row.written + n, row.ids[-1]
            if row.ids[-1] != stop and len(row.ids) < s.max_new_tokens:
                continue
            reply = self.tokenizer.decode(row.ids, skip_special_tokens=False)
            action = Action(parse_action(reply.removesuffix(END_OF_TURN)), tuple(row.ids),
                            tuple(row.logprobs), tuple(row.context.tolist()))
            row.actions, row.key = row.actions + (action,), None
            ended[r] = action
        return ended

    def _placed(self, arrays):
        """Device arrays of `arrays` [N, ...]; on a mesh, rows over its batch axes where they
        divide (as `tpu.compile` compiles the sampler)."""
        if self.mesh is None:
            return tuple(jnp.asarray(x) for x in arrays)
        shards = math.prod(self.mesh.shape[a] for a in BATCH_AXES)
        return tuple(jax.device_put(x, row_sharding(self.mesh)) if x.shape[0] % shards == 0
                     else jnp.asarray(x) for x in arrays)

    def _empty_cache(self, rows: int, slots: int) -> kv_cache.Cache:
        """An empty cache in the sampling dtype (`_on_mesh`)."""
        return self._on_mesh(kv_cache.empty(self.cfg, rows, slots, self.sampling.dtype))

    def _on_mesh(self, cache: kv_cache.Cache) -> kv_cache.Cache:
        """`cache` as the sampler keeps it: on a mesh, its rows over the batch axes
        (`tpu.mesh.cache_shardings`), so each device decodes its share of them."""
        if self.mesh is None:
            return cache
        return jax.device_put(cache, cache_shardings(cache, self.mesh))

    def _make_room(self, rows: int, emptied: list[int], kept: int, needed: int) -> None:
        """Empties rows and makes `needed` free slots after the cache's length, in a cache of
        `bucket(kept + needed)` slots when it can: `kept` is the most slots a row that keeps
        its stream holds. Decode and prefill read every slot of the cache, so one left larger
        than that, by finished episodes or by padding, is compacted and cut down."""
        fits = bucket(kept + needed)
        if self._cache is None or kept == 0:  # no row keeps anything: start afresh
            self._cache = self._empty_cache(rows, fits)
            return
        if emptied:
            self._cache = kv_cache.reset_rows(self._cache,
                                              jnp.asarray(np.isin(np.arange(rows), emptied)))
        slots = self._cache.valid.shape[1]
        if int(self._cache.length) + needed > slots or fits < slots:
            self._cache = kv_cache.compact(self._cache)
            if fits != slots:
                self._cache = kv_cache.resize(self._cache, fits)

    def _prefill_shared(self, rows: int, distinct: dict, new: dict, fresh: list[int],
                        length: int) -> None:
        """Prefills each distinct stream head once and copies it to the rows that share it."""
        count = bucket(len(distinct))
        tokens = np.full((count, length), self.pad_id, np.int32)
        positions = np.full((count, length), -1, np.int32)
        for head, index in distinct.items():
            tokens[index, length - len(head):] = head
            positions[index, length - len(head):] = np.arange(len(head))
        sources = np.full(rows, -1, np.int32)
        for row in fresh:
            sources[row] = distinct.get(tuple(new[row][:-1].tolist()), -1)
        self._cache = kv_cache.prefill_rows(self.params, self.cfg, self._cache,
                                            *self._placed((tokens, positions, sources)))
