"""Per-device memory of a training setup, before renting the chips:
``python -m tpu.plan --model FOLDER_OR_PRESET --mesh data=1,fsdp=8,model=1 --chip v5p``.

What each line counts, per device:
- params: float32 master weights under `tpu.mesh.LEARNER_RULES` (exact: shard shapes).
- optimizer: AdamW's two float32 moments, sharded like the params (exact).
- gradients: a float32 accumulator like the params, and with micro-batches one more for the
  micro-batch being added (exact).
- compute copy: the params cast to the compute dtype (none in float32).
- reference: with ``reference`` (a KL penalty, `LossConfig.kl_coef` > 0), the starting
  model's weights the trainer keeps for it, in the compute dtype, sharded like the params;
  they stay on the devices while the sampler runs.
- gathered weights: what the batch axes' shards of the compute copy are gathered into for the
  matmuls: one layer's weights at a time and the embedding and the LM head whole, in the
  compute dtype; and the LM head's float32 gradient, whole until the logits chunks have all
  added to it (with ``head_per_device``, twice: the reduce-scatter reads a padded copy).
- activations: one micro-batch of rows over the batch axes. With remat, each tile of layers
  (`QwenConfig.pattern`: one layer for Qwen2/3, four for Qwen3.5) keeps its input [b, L, D]
  and one tile at a time holds its layers' internals and one query block's float32 scores
  (`models.qwen.model.attention` scores 256 queries at a time); without remat, every
  layer keeps its internals and every block's scores, mask and probabilities (causal: about
  L² / 2 per head each, float32). Plus the LM head's float32 logits: one chunk [b, chunk, V],
  its log-softmax and its gradient, or every chunk's logits with ``recompute_logits=False``.
  Heads and MLP channels are split over "model" where they divide.
- KV cache: the sampler's keys and values over the rows it decodes at once, at a context of
  prompt + a turn's new tokens + response slots, in the sampler dtype (Gated DeltaNet layers:
  their float32 state and convolution history instead).
- sampler copy: the params in the sampler dtype under `tpu.mesh.SAMPLER_RULES`; with
  ``staleness`` s (asynchronous updates), s + 1 of them: the one the rollouts sample with and
  those the learner has offered since.
- sampler activations: the larger of the sampler's two programs' temporaries
  (`sampler_activation_bytes`).

On a slice of several hosts each host samples its share of the rows on one chip with a whole
copy of the weights (`tpu.mesh.to_sampler`), and the sampler lines count that chip. The step's
total is its larger phase: the learner's lines, or the rollout's (the learner's params and
AdamW state stay resident beside the sampler's lines). With asynchronous updates the two run
at once on the same chips, and the total is the learner's lines and the sampler's together.

The activation lines are estimates of what the TPU compiler keeps; `bench/plan.py` compares
every line group with the compiler's own memory analysis (`tpu.compile`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Mapping
from pathlib import Path

import jax

from models import qwen
from models.qwen.config import FULL, LINEAR, QwenConfig
from models.qwen.deltanet import CHUNK
from models.qwen.model import ATTENTION_BLOCK
from models.qwen.params import ArrayInfo
from tpu import roofline
from tpu.mesh import LEARNER_RULES, SAMPLER_RULES
from tpu.mesh_config import AXES, BATCH_AXES, MeshConfig, parse
from tpu.presets import PRESETS

GiB = 2**30

# High-bandwidth memory per chip, bytes.
CHIPS: Mapping[str, int] = {name: chip.hbm_bytes for name, chip in roofline.CHIPS.items()}
BAND = 1.15  # plan / compiler: the planner is conservative, by at most this much
HEADROOM = 0.9  # share of a chip's memory a plan may fill (XLA and the runtime need the rest)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}




@dataclasses.dataclass(frozen=True)
class Workload:
    """What one step holds: the papers' ALFWorld setup by default (16 groups of 8,
    2,048 prompt + 512 response tokens)."""

    rows: int = 128  # learner batch rows (groups x group size)
    micro_batches: int = 8
    prompt: int = 2048
    response: int = 512
    sampler_rows: int = 128  # rows the sampler decodes at once (over all hosts)
    group_size: int = 8  # rows that share a prompt, prefilled once
    turn_tokens: int = 128  # new tokens a turn prefills before generating (an observation)
    compute_dtype: str = "bfloat16"
    sampler_dtype: str = "bfloat16"
    remat: bool = True
    logits_chunk: int = 128
    recompute_logits: bool = True
    head_per_device: bool = False  # `LearnerConfig.head_per_device`
    reference: bool = False  # a KL reference model beside the learner (kl_coef > 0)
    staleness: int = 0  # `AsyncConfig.max_staleness`: the sampler runs beside the learner

    def __post_init__(self):
        if self.staleness < 0:
            raise ValueError(f"staleness must be >= 0, got {self.staleness}")
        if min(self.rows, self.micro_batches, self.prompt + self.response, self.sampler_rows,
               self.group_size, self.turn_tokens, self.logits_chunk) < 1:
            raise ValueError("rows, micro_batches, prompt + response, sampler_rows, group_size, "
                             "turn_tokens and logits_chunk must be >= 1")
        for name in ("compute_dtype", "sampler_dtype"):
            if getattr(self, name) not in DTYPE_BYTES:
                raise ValueError(f"{name} must be one of {sorted(DTYPE_BYTES)}")

    @property
    def length(self) -> int:
        return self.prompt + self.response


WORKLOAD_HELP = {
    "rows": "learner batch rows (groups x group size)",
    "micro_batches": "micro-batches the learner's rows are accumulated over",
    "prompt": "prompt tokens of a row (the context before its reply)",
    "response": "tokens of a reply (the learner's length is prompt + response)",
    "sampler_rows": "rows the sampler decodes at once, over all hosts",
    "group_size": "rows that share a prompt, prefilled once",
    "turn_tokens": "new tokens a turn prefills before generating (an observation)",
    "compute_dtype": "the learner's compute dtype (master weights stay float32)",
    "sampler_dtype": "the sampler's weights and cache dtype",
    "remat": "recompute each layer's internals in the backward pass",
    "logits_chunk": "positions per chunk of the LM head and its log-softmax",
    "recompute_logits": "recompute each logits chunk in the backward pass",
    "head_per_device": "run the LM head on each device's rows (LearnerConfig.head_per_device)",
    "reference": "a KL reference model beside the learner (learner.loss.kl_coef > 0)",
    "staleness": ("asynchronous.max_staleness: updates the sampler runs ahead of the learner, "
                  "on the same chips (0: they take turns)"),
}


def _shard_elements(info: ArrayInfo, rules, sizes: Mapping[str, int]) -> int:
    """Elements of one device's shard of a parameter (uneven dimensions replicated, as
    `models.qwen.sharding.spec_for` does)."""
    count = 1
    for size, axis in zip(info.shape, info.axes):
        target = rules[axis]
        split = sizes[target] if target is not None and size % sizes[target] == 0 else 1
        count *= size // split
    return count


def param_elements(cfg: QwenConfig, rules, sizes: Mapping[str, int]) -> int:
    """Elements of the params on one device under `rules` on a mesh of `sizes`."""
    leaves = jax.tree.leaves(qwen.describe(cfg), is_leaf=lambda x: isinstance(x, ArrayInfo))
    return sum(_shard_elements(info, rules, sizes) for info in leaves)


def _split(count: int, ways: int) -> float:
    """`count` heads or channels per device: split `ways` when they divide, else all."""
    return count / ways if count % ways == 0 else count


def token_bytes(cfg: QwenConfig, model: int, dtype: str) -> dict[str, float]:
    """layer kind -> bytes one token's layer holds besides its attention scores, with heads
    and channels split `model` ways, activations in `dtype`:
    - both kinds: residuals, projections' outputs and the norms with their float32 inputs
      (8 D), and the MLP's gate, up, sigmoid and product;
    - full attention: q k v before and after the rotary embedding, the output gate, the
      attention output;
    - Gated DeltaNet: its conv channels before and after the convolution, z and the gated
      output; in float32 q and k repeated to every value head and their decayed copies, v,
      u, w, the output and its norm; per chunk of `CHUNK` tokens the decay, mix and intra-chunk
      matrices [C, C] and the state [dk, dv] the backward pass keeps, a token's share.
    """
    cb = DTYPE_BYTES[dtype]
    common = (8 * cfg.hidden_size + 4 * _split(cfg.intermediate_size, model)) * cb
    heads, kv = _split(cfg.num_heads, model), _split(cfg.num_kv_heads, model)
    gate = heads if cfg.attn_output_gate else 0
    out = {FULL: common + (3 * heads + 4 * kv + gate) * cfg.head_dim * cb}
    if cfg.num_linear:
        values = _split(cfg.linear_num_value_heads, model)
        dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        channels = _split(cfg.linear_conv_dim, model)
        float32 = values * (5 * dk + 4 * dv + 3 * CHUNK + dk * dv / CHUNK) * 4
        out[LINEAR] = common + (2 * channels + 2 * values * dv) * cb + float32
    return out


def activation_bytes(cfg: QwenConfig, work: Workload, sizes: Mapping[str, int]) -> float:
    """The forward pass's saved activations and the LM head's logits, one device."""
    shards = math.prod(sizes[a] for a in BATCH_AXES)
    rows = max(1, work.rows // (work.micro_batches * shards))
    tokens, length, model = rows * work.length, work.length, sizes["model"]
    cb = DTYPE_BYTES[work.compute_dtype]
    d, heads = cfg.hidden_size, _split(cfg.num_heads, model)
    queries = min(ATTENTION_BLOCK, length) if work.remat else length / 2
    scores = (1 if work.remat else 3) * rows * heads * queries * length * 4
    per_token = token_bytes(cfg, model, work.compute_dtype)
    per_layer = {kind: tokens * size + (scores if kind == FULL else 0.0)
                 for kind, size in per_token.items()}
    if work.remat:  # each tile's input, and one tile's internals (`forward` remats by tile)
        tiles = cfg.num_layers // len(cfg.pattern)
        layers = tiles * tokens * d * cb + sum(per_layer[kind] for kind in cfg.pattern)
    else:
        layers = sum(per_layer[kind] for kind in cfg.kinds)
    vocab = _split(cfg.vocab_size, model)
    kept = work.length if not work.recompute_logits else min(work.logits_chunk, work.length)
    logits = rows * (kept + 2 * min(work.logits_chunk, work.length)) * vocab * 4
    return layers + logits


def sampler_view(work: Workload, sizes: Mapping[str, int], hosts: int
                 ) -> tuple[int, dict[str, int]]:
    """(rows on one device, mesh sizes) of the sampler: on one host the learner's mesh with
    rows over the batch axes; on several, each host's rows on one chip (`tpu.mesh.to_sampler`)."""
    if hosts > 1:
        return math.ceil(work.sampler_rows / hosts), dict.fromkeys(AXES, 1)
    return math.ceil(work.sampler_rows / math.prod(sizes[a] for a in BATCH_AXES)), dict(sizes)


def cache_slots(work: Workload) -> int:
    """Slots per row of the sampler's cache: the prompt, a turn's new tokens, the response."""
    return work.prompt + work.turn_tokens + work.response


def slot_bytes(cfg: QwenConfig, work: Workload, model: int) -> float:
    """One slot of one full-attention layer of a row of the sampler's cache (keys and values),
    on one device of a `model`-way split."""
    return 2 * _split(cfg.num_kv_heads, model) * cfg.head_dim * DTYPE_BYTES[work.sampler_dtype]


def cache_row_bytes(cfg: QwenConfig, work: Workload, model: int, slots: int | None = None
                    ) -> float:
    """One row of the sampler's cache, on one device of a `model`-way split: keys and values
    of every slot (`slots`, by default `cache_slots`), or a Gated DeltaNet layer's float32
    state and conv history."""
    sb = DTYPE_BYTES[work.sampler_dtype]
    slots = cache_slots(work) if slots is None else slots
    attention = cfg.num_full * slots * slot_bytes(cfg, work, model)
    linear = 0.0
    if cfg.num_linear:
        history = (cfg.linear_conv_kernel - 1) * _split(cfg.linear_conv_dim, model) * sb
        linear = cfg.num_linear * (state_bytes(cfg, model) + history)
    return attention + linear


def state_bytes(cfg: QwenConfig, model: int) -> float:
    """One Gated DeltaNet layer's float32 state [heads, dk, dv] of one row, on one device of a
    `model`-way split (0 without such layers)."""
    if not cfg.num_linear:
        return 0.0
    heads = _split(cfg.linear_num_value_heads, model)
    return heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4.0


def cache_bytes(cfg: QwenConfig, work: Workload, sizes: Mapping[str, int], hosts: int = 1
                ) -> float:
    """The sampler's KV cache (and Gated DeltaNet state) for its rows, one device."""
    rows, sizes = sampler_view(work, sizes, hosts)
    return rows * cache_row_bytes(cfg, work, sizes["model"])


def _layer_bytes(cfg: QwenConfig, work: Workload, rows: float, tokens: int, model: int,
                 slots: int, score_copies: int) -> float:
    """The largest sampler layer's temporaries for `rows` x `tokens` new tokens reading
    `slots` slots: its internals, and `score_copies` float32 arrays of one query block's
    scores (the scores, their exponentials and probabilities, and the compiler's copies)."""
    block = min(tokens, ATTENTION_BLOCK)
    scores = score_copies * rows * _split(cfg.num_heads, model) * block * slots * 4
    per_token = token_bytes(cfg, model, work.sampler_dtype)
    return max(rows * tokens * size + (scores if kind == FULL else 0.0)
               for kind, size in per_token.items())


def relaid_bytes(cfg: QwenConfig, work: Workload, model: int) -> float:
    """The projections whose outputs split into heads (attention's q, output gate, k and v;
    the Gated DeltaNet's z), every layer, on one device of a `model`-way split: the TPU
    compiler lays them out anew for a turn's decoding."""
    heads, kv = _split(cfg.num_heads, model), _split(cfg.num_kv_heads, model)
    gate = heads if cfg.attn_output_gate else 0
    full = cfg.num_full * (heads + gate + 2 * kv) * cfg.head_dim
    linear = cfg.num_linear * _split(cfg.linear_num_value_heads, model) * (
        cfg.linear_value_head_dim if cfg.num_linear else 0)
    return cfg.hidden_size * (full + linear) * DTYPE_BYTES[work.sampler_dtype]


def tile_bytes(cfg: QwenConfig, work: Workload, sizes: Mapping[str, int]) -> float:
    """Two tiles of layers (`QwenConfig.pattern`) of the sampler's weights, one device: the
    TPU compiler fetches the next tile's weights while a tile runs, into buffers of their
    own."""
    description = qwen.describe(cfg)
    embedding = _shard_elements(description["embed"], SAMPLER_RULES, sizes)
    head = 0 if cfg.tie_word_embeddings else _shard_elements(description["lm_head"],
                                                             SAMPLER_RULES, sizes)
    layers = param_elements(cfg, SAMPLER_RULES, sizes) - embedding - head
    return 2 * layers / cfg.num_layers * len(cfg.pattern) * DTYPE_BYTES[work.sampler_dtype]


def sampler_activation_bytes(cfg: QwenConfig, work: Workload, sizes: Mapping[str, int],
                             hosts: int = 1) -> float:
    """The sampler's temporaries, one device: the larger of its two programs'.

    - The prefill of the groups' shared prompts (`kv_cache.prefill_rows`): a fresh cache of
      the prompts' slots for this device's prompts (all of them where they do not divide over
      the batch shards), the weights the compiler lays out anew or fetches ahead (as in a
      turn, below), one layer's internals for the prompts reading their own slots with five
      float32 arrays of a query block's scores (the TPU compiler's count), and one
      full-attention layer's prompt slots gathered whole and copied into every row, layer by
      layer, in place.
    - A turn (`sampler.compiled_generate`): the projections the TPU compiler lays out anew
      (`relaid_bytes`), the weights of the tile running and the next (`tile_bytes`), and the
      larger of its two phases. Its new tokens read the cache's keys (and the Gated DeltaNet
      layers' state and history) from a copy in a layout of their own, its values in place,
      beside one layer's internals for the new tokens with one float32 copy of a query block's
      scores (their softmax is fused). The decode loop then carries a copy of the whole cache
      in the layout it picks for it, beside the sampling's float32 logits (the logits, their
      sort, cumulative sum and probabilities, about 5 [B, V]) and, with Gated DeltaNet layers,
      three float32 arrays the size of one layer's state for the update.
    """
    rows, sizes = sampler_view(work, sizes, hosts)
    model = sizes["model"]
    shards = math.prod(sizes[a] for a in BATCH_AXES)
    prompts = max(1, work.sampler_rows // hosts // work.group_size)
    split = prompts / shards if prompts % shards == 0 else prompts
    weights = relaid_bytes(cfg, work, model) + tile_bytes(cfg, work, sizes)
    prefill = (split * cache_row_bytes(cfg, work, model, work.prompt)
               + (prompts + rows) * work.prompt * slot_bytes(cfg, work, model) + weights
               + _layer_bytes(cfg, work, split, work.prompt, model, work.prompt, 5))
    cache = rows * cache_row_bytes(cfg, work, model)
    values = rows * cfg.num_full * cache_slots(work) * slot_bytes(cfg, work, model) / 2
    new_tokens = cache - values + _layer_bytes(cfg, work, rows, work.turn_tokens, model,
                                               cache_slots(work), 1)
    logits = 5 * rows * _split(cfg.vocab_size, model) * 4
    decoding = cache + logits + 3 * rows * state_bytes(cfg, model)
    turn = weights + max(new_tokens, decoding)
    return max(prefill, turn)


def gathered_bytes(cfg: QwenConfig, sizes: Mapping[str, int], work: Workload) -> float:
    """The "gathered weights" line: the compute copy's shards gathered over the batch axes
    (still split over "model"), and the LM head's float32 gradient; with
    `Workload.head_per_device`, a second float32 copy of that gradient, which the TPU compiler
    pads for the reduce-scatter. Nothing is gathered without sharded batch axes."""
    if math.prod(sizes[a] for a in BATCH_AXES) == 1:
        return 0.0
    gathered = {**sizes, **{a: 1 for a in BATCH_AXES}}
    description = qwen.describe(cfg)
    embedding = _shard_elements(description["embed"], LEARNER_RULES, gathered)
    head = (embedding if cfg.tie_word_embeddings
            else _shard_elements(description["lm_head"], LEARNER_RULES, gathered))
    untied = 0 if cfg.tie_word_embeddings else head
    layers = param_elements(cfg, LEARNER_RULES, gathered) - embedding - untied
    cb = DTYPE_BYTES[work.compute_dtype]
    gradient_copies = 2 if work.head_per_device else 1
    return cb * (layers / cfg.num_layers + embedding + untied) + 4.0 * gradient_copies * head


LEARNER_LINES = ("params", "optimizer", "gradients", "compute copy", "reference",
                 "gathered weights", "activations")
SAMPLER_LINES = ("kv cache", "sampler copy", "sampler activations")
STATE_LINES = ("params", "optimizer", "reference")  # on the devices while the sampler runs


def check_split(work: Workload, sizes: Mapping[str, int]) -> None:
    """Raises ValueError, saying what would split, unless the learner's rows split evenly into
    its micro-batches on every batch shard of a mesh of `sizes`."""
    shards = math.prod(sizes[a] for a in BATCH_AXES)
    if work.rows % (work.micro_batches * shards) == 0:
        return
    per_shard = work.rows // shards if work.rows % shards == 0 else 0
    fewer = [m for m in range(1, work.micro_batches) if per_shard % m == 0] if per_shard else []
    options = []
    if fewer == [1]:
        options.append("1 micro-batch (1 row per batch shard)")
    elif fewer:
        counts = ", ".join(map(str, fewer[:-1])) + f" or {fewer[-1]}"
        options.append(f"{counts} micro-batches ({per_shard} rows per batch shard)")
    options.append(f"rows a multiple of {work.micro_batches * shards}")
    raise ValueError(f"{work.rows} rows do not split into {work.micro_batches} micro-batches x "
                     f"{shards} batch shards (the mesh's {', '.join(BATCH_AXES)} axes): use "
                     + ", or ".join(options))


def plan(cfg: QwenConfig, mesh: MeshConfig, device_count: int, work: Workload = Workload(),
         hosts: int = 1) -> dict[str, float]:
    """name -> bytes per device of every line of the module docstring, and "total".

    Raises:
      ValueError: `mesh` does not fit `device_count` devices, or the rows do not split over the
        micro-batches and batch shards.
    """
    sizes = mesh.shape(device_count)
    check_split(work, sizes)
    params = param_elements(cfg, LEARNER_RULES, sizes)
    cb = DTYPE_BYTES[work.compute_dtype]
    out = {
        "params": params * 4.0,
        "optimizer": 2 * params * 4.0,
        "gradients": params * 4.0 * (2 if work.micro_batches > 1 else 1),
        "compute copy": 0.0 if cb == 4 else float(params * cb),
        "reference": float(params * cb) if work.reference else 0.0,
        "gathered weights": gathered_bytes(cfg, sizes, work),
        "activations": activation_bytes(cfg, work, sizes),
        "kv cache": cache_bytes(cfg, work, sizes, hosts),
        "sampler copy": param_elements(cfg, SAMPLER_RULES, sampler_view(work, sizes, hosts)[1])
        * float(DTYPE_BYTES[work.sampler_dtype]) * (work.staleness + 1),
        "sampler activations": sampler_activation_bytes(cfg, work, sizes, hosts),
    }
    learner = sum(out[name] for name in LEARNER_LINES)
    rollout = sum(out[name] for name in STATE_LINES + SAMPLER_LINES)
    sampler = sum(out[name] for name in SAMPLER_LINES)
    out["total"] = learner + sampler if work.staleness else max(learner, rollout)
    return out


def fits(total: float, chip: str) -> bool:
    """Whether `total` bytes fit in `HEADROOM` of one `chip`'s memory."""
    return total <= HEADROOM * CHIPS[chip]


# The band of plan / compiler that the calibration records hold (bench/results/plan.json and
# topologies.json, every step of every preset compiled): the plan is at least 0.92 of the
# compiler's memory analysis, and at most 1.28 of its peak of live bytes (1.49 for a learner
# step alone). The bounds below leave a margin around them.
PLAN_OVER_ANALYSIS_MIN = 0.9
PLAN_OVER_LIVE_MAX = 1.5


def decided(total: float, chip: str) -> bool | None:
    """Whether a step the plan puts at `total` bytes per device fits `chip`, where the
    calibration decides it without a compile: True when the compiler's memory analysis, at
    most ``total / PLAN_OVER_ANALYSIS_MIN``, fits; False when its live bytes, at least
    ``total / PLAN_OVER_LIVE_MAX``, do not; None in between."""
    if fits(total / PLAN_OVER_ANALYSIS_MIN, chip):
        return True
    if not fits(total / PLAN_OVER_LIVE_MAX, chip):
        return False
    return None


def model_config(name: str) -> QwenConfig:
    """A preset's config, or a local model folder's (its config.json only).

    Raises:
      ValueError: neither a preset nor a folder with a config.json.
    """
    if name.lower() in PRESETS:
        return qwen.from_hf_config(PRESETS[name.lower()])
    if (Path(name) / "config.json").is_file():
        return qwen.read_config(name)
    raise ValueError(f"--model {name!r} is neither a preset ({', '.join(PRESETS)}) nor a "
                     f"folder with a config.json")


ARCHITECTURE_FIELDS = ("model_type", "vocab_size", "hidden_size", "intermediate_size",
                      "num_layers", "num_heads", "num_kv_heads", "head_dim")


def check_architecture(cfg: QwenConfig, name: str) -> None:
    """Raises ValueError when a loaded model's `cfg` is not the preset `name`'s architecture
    (a recipe written for one model, started from another)."""
    expected = qwen.from_hf_config(PRESETS[name])
    differing = [f"{field} {getattr(cfg, field)} (not {getattr(expected, field)})"
                 for field in ARCHITECTURE_FIELDS
                 if getattr(cfg, field) != getattr(expected, field)]
    if differing:
        raise ValueError(f"the config is written for {name}, and the model it starts from has "
                         f"{', '.join(differing)}: start from a {name} checkpoint, or set "
                         "architecture to the model's preset (or null)")


def table(cfg: QwenConfig, mesh: MeshConfig, devices: int, work: Workload,
          chips: tuple[str, ...] = tuple(CHIPS), hosts: int = 1) -> str:
    """A markdown table of the plan with and without remat, GiB per device, ending with one
    line per chip in `chips`: whether each column's total fits in `HEADROOM` of its memory."""
    rows = {remat: plan(cfg, mesh, devices, dataclasses.replace(work, remat=remat), hosts)
            for remat in (True, False)}
    setup = (f"mesh {mesh.describe()} on {devices} devices of {hosts} host"
             f"{'s' if hosts > 1 else ''}; {work.rows} rows x {work.length} "
             f"tokens in {work.micro_batches} micro-batches, {work.compute_dtype} compute; "
             f"sampler {work.sampler_rows} rows, {work.sampler_dtype}")
    lines = [setup, "", "| per device (GiB) | remat | no remat |", "|---|---:|---:|"]
    for name in (n for n in rows[True] if rows[True][n] or rows[False][n]):
        lines.append(f"| {name} | {rows[True][name] / GiB:.2f} | {rows[False][name] / GiB:.2f} |")
    for chip in chips:
        verdict = {r: "fits" if fits(rows[r]["total"], chip) else "does not fit" for r in rows}
        lines.append(f"| {chip} ({CHIPS[chip] / GiB:.0f} GiB, {HEADROOM:.0%} usable) | "
                     f"{verdict[True]} | {verdict[False]} |")
    return "\n".join(lines)


def add_workload_flags(parser: argparse.ArgumentParser, remat: bool = True) -> None:
    """A flag per `Workload` field (``--micro-batches 8``, ``--no-recompute-logits``), with its
    default; ``--remat`` only when `remat`."""
    defaults = Workload()
    for field in dataclasses.fields(Workload):
        if field.name == "remat" and not remat:
            continue
        flag, default = "--" + field.name.replace("_", "-"), getattr(defaults, field.name)
        described = f"{WORKLOAD_HELP[field.name]} (default: {default})"
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                                help=WORKLOAD_HELP[field.name])
        else:
            parser.add_argument(flag, type=type(default), default=default, help=described)


def workload_from_flags(args: argparse.Namespace) -> Workload:
    """The Workload of `add_workload_flags`' flags (remat: the default when it has none)."""
    return Workload(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Workload)
                       if hasattr(args, f.name)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpu.plan", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help=f"a preset ({', '.join(PRESETS)}) or a "
                        "local model folder")
    parser.add_argument("--mesh", default="fsdp=-1", help="axis sizes, e.g. data=2,fsdp=4,model=1")
    parser.add_argument("--devices", type=int, default=8, help="devices the mesh spans")
    parser.add_argument("--hosts", type=int, default=1,
                        help="hosts the devices are on (each samples on one chip)")
    parser.add_argument("--chip", choices=sorted(CHIPS),
                        help="say whether the plan fits this chip only (default: every chip)")
    add_workload_flags(parser, remat=False)
    args = parser.parse_args(argv)
    try:
        cfg = model_config(args.model)
        mesh = parse(args.mesh)
        work = workload_from_flags(args)
        print(f"{args.model}: {param_elements(cfg, LEARNER_RULES, dict.fromkeys(AXES, 1)):,} "
              "parameters")
        chips = (args.chip,) if args.chip else tuple(CHIPS)
        print(table(cfg, mesh, args.devices, work, chips, args.hosts))
        remat = plan(cfg, mesh, args.devices, dataclasses.replace(work, remat=True), args.hosts)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not any(fits(remat["total"], chip) for chip in chips):
        print(f"fits no chip of {', '.join(chips)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
