"""Hugging Face checkpoint folders <-> our params pytree.

A folder holds `config.json` and either `model.safetensors` or sharded `*.safetensors` with
`model.safetensors.index.json`. Every tensor is checked against the shape `describe(cfg)`
implies before it is converted (HF linears are `[out, in]`; ours are input-major with heads as
their own axis) and cast to the target dtype, one tensor at a time, then placed with the given
shardings. Saving writes a folder `transformers` loads back (`from_pretrained`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from models.qwen.config import FULL, LINEAR, QwenConfig, from_hf_config, to_hf_config
from models.qwen.params import describe

log = logging.getLogger(__name__)
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"

# group -> our weight -> (HF name inside `<prefix>layers.{i}.`, layout); each group is stacked
# over the layers of its kind (`layers`: all, `attn`: full attention, `linear`: Gated DeltaNet).
GROUPS = {
    "layers": {
        "attn_norm": ("input_layernorm.weight", "same"),
        "mlp_norm": ("post_attention_layernorm.weight", "same"),
        "gate": ("mlp.gate_proj.weight", "linear"),
        "up": ("mlp.up_proj.weight", "linear"),
        "down": ("mlp.down_proj.weight", "linear"),
    },
    "attn": {
        "q": ("self_attn.q_proj.weight", "linear"),
        "k": ("self_attn.k_proj.weight", "linear"),
        "v": ("self_attn.v_proj.weight", "linear"),
        "o": ("self_attn.o_proj.weight", "linear_from_heads"),
        "q_bias": ("self_attn.q_proj.bias", "flat"),
        "k_bias": ("self_attn.k_proj.bias", "flat"),
        "v_bias": ("self_attn.v_proj.bias", "flat"),
        "o_bias": ("self_attn.o_proj.bias", "same"),
        "q_norm": ("self_attn.q_norm.weight", "same"),
        "k_norm": ("self_attn.k_norm.weight", "same"),
    },
    "linear": {
        "qkv": ("linear_attn.in_proj_qkv.weight", "linear"),
        "z": ("linear_attn.in_proj_z.weight", "linear"),
        "b": ("linear_attn.in_proj_b.weight", "linear"),
        "a": ("linear_attn.in_proj_a.weight", "linear"),
        "conv": ("linear_attn.conv1d.weight", "conv"),
        "dt_bias": ("linear_attn.dt_bias", "same"),
        "A_log": ("linear_attn.A_log", "same"),
        "norm": ("linear_attn.norm.weight", "same"),
        "out": ("linear_attn.out_proj.weight", "linear_from_heads"),
    },
}
# Qwen3.5 packs the output gate into q_proj, interleaved per head: [q_h (E rows), gate_h (E)].
GATED_Q = {"q": ("self_attn.q_proj.weight", "gated_query"),
           "q_gate": ("self_attn.q_proj.weight", "gated_gate")}
TOP_NAMES = {
    "embed": ("embed_tokens.weight", "same"),
    "norm": ("norm.weight", "same"),
}
LM_HEAD = "lm_head.weight"
TEXT_PREFIX, VL_TEXT_PREFIX = "model.", "model.language_model."
SKIPPED_PREFIXES = ("model.visual.", "mtp.")
DERIVED = ("rotary_emb.inv_freq",)  # buffers some checkpoints save; recomputed from the config


def names_of(cfg: QwenConfig, group: str) -> dict[str, tuple[str, str]]:
    """Our weight -> (HF name, layout) for one group of `cfg`."""
    table = dict(GROUPS[group])
    if group == "attn" and cfg.attn_output_gate:
        table.update(GATED_Q)
    return table


def layer_indices(cfg: QwenConfig, group: str) -> list[int]:
    """The model layers a group's stack runs over, in order."""
    if group == "layers":
        return list(range(cfg.num_layers))
    kind = FULL if group == "attn" else LINEAR
    return [i for i, k in enumerate(cfg.kinds) if k == kind]


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one of our (per-layer) arrays is stored in a Hugging Face checkpoint."""

    hf_shape: Callable[[tuple[int, ...]], tuple[int, ...]]  # ours -> HF shape
    load: Callable[[np.ndarray, tuple[int, ...]], np.ndarray]  # HF tensor -> ours of a shape
    save: Callable[[np.ndarray], np.ndarray] | None  # ours -> HF (None: saved with its pair)


def _matrix(inputs: int) -> Layout:
    """Ours input-major with `inputs` leading input axes; HF a transposed [out, in] matrix."""
    return Layout(
        hf_shape=lambda s: (math.prod(s[inputs:]), math.prod(s[:inputs])),
        load=lambda x, s: x.T.reshape(s),
        save=lambda x: x.reshape(math.prod(x.shape[:inputs]), -1).T)


def _gated(part: int) -> Layout:
    """Query (part 0) or gate (part 1) [d, h, e] of Qwen3.5's interleaved q_proj [h*2e, d]."""
    return Layout(
        hf_shape=lambda s: (2 * s[1] * s[2], s[0]),
        load=lambda x, s: x.T.reshape(s[0], s[1], 2, s[2])[:, :, part],
        save=None)


LAYOUTS = {
    "same": Layout(lambda s: s, lambda x, s: x, lambda x: x),
    "flat": Layout(lambda s: (math.prod(s),), lambda x, s: x.reshape(s), lambda x: x.reshape(-1)),
    "linear": _matrix(1),  # [d, ...outputs] <- HF [outputs, d]
    "linear_from_heads": _matrix(2),  # [h, e, d] <- HF [d, h*e]
    "conv": Layout(lambda s: (s[1], 1, s[0]), lambda x, s: x[:, 0, :].T,
                   lambda x: x.T[:, None, :]),  # [kernel, channels] <- HF [channels, 1, kernel]
    "gated_query": _gated(0),
    "gated_gate": _gated(1),
}


def gated_q_to_hf(query: np.ndarray, gate: np.ndarray) -> np.ndarray:
    """Our q and q_gate [d, h, e] as Qwen3.5's interleaved q_proj weight [h*2e, d]."""
    return np.stack([query, gate], axis=2).reshape(query.shape[0], -1).T


def _json_file(path: Path) -> dict:
    """A JSON object from a file; a ValueError naming the file otherwise."""
    try:
        value = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if isinstance(value, dict):
        return value
    raise ValueError(f"{path}: expected a JSON object, got {type(value).__name__}")


def _open_safetensors(file: Path):
    """A safetensors reader (a context manager); a ValueError naming the file if it is
    truncated or corrupt."""
    try:
        return safe_open(file, framework="numpy")
    except SafetensorError as e:
        raise ValueError(f"{file}: cannot be read as safetensors ({e}); the file may be "
                         "truncated or corrupt") from None


def _tensor_files(folder: Path) -> dict[str, Path]:
    """HF tensor name -> the safetensors file holding it."""
    if (folder / INDEX).exists():
        weight_map = _json_file(folder / INDEX).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{folder / INDEX}: no \"weight_map\" object")
        return {name: folder / file for name, file in weight_map.items()}
    if (folder / SINGLE).exists():
        with _open_safetensors(folder / SINGLE) as f:
            return {name: folder / SINGLE for name in f.keys()}
    raise FileNotFoundError(f"{folder}: no {SINGLE} and no {INDEX}")


def read_config(folder: str | Path) -> QwenConfig:
    """The QwenConfig of a checkpoint folder."""
    path = Path(folder) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    return from_hf_config(_json_file(path))


def load(folder: str | Path, dtype=jnp.float32,
         place: Callable[[str, np.ndarray], jax.Array] | None = None):
    """Loads a checkpoint folder.

    Args:
      folder: a local Hugging Face model folder (text-only, or a Qwen3.5 vision-language
        checkpoint, whose `model.language_model.*` weights are read and `model.visual.*` /
        `mtp.*` skipped with a logged note).
      dtype: target parameter dtype.
      place: optional (our path "attn.q", numpy array) -> device array, e.g. a
        `jax.device_put` with the array's sharding; default `jnp.asarray`.

    Returns:
      (QwenConfig, params pytree).

    Raises:
      FileNotFoundError: missing folder, config or weights file.
      ValueError: a missing tensor, a shape mismatch or a non-float tensor, naming the tensor
        and its file; a config or index that is not JSON, or a truncated or corrupt weights
        file, naming the file; an unsupported target `dtype`.

    Tensors the model does not use are ignored with a warning that names them.
    """
    folder = Path(folder)
    cfg = read_config(folder)
    files = _tensor_files(folder)
    prefix = VL_TEXT_PREFIX if any(n.startswith(VL_TEXT_PREFIX) for n in files) else TEXT_PREFIX
    skipped = [n for n in files if n.startswith(SKIPPED_PREFIXES)]
    if skipped:
        log.info("%s: skipping %d vision / multi-token-prediction tensors", folder, len(skipped))
    place = place or (lambda path, x: jnp.asarray(x))
    unused = {n for n in files if not n.startswith(SKIPPED_PREFIXES) and not n.endswith(DERIVED)}
    with contextlib.ExitStack() as stack:
        handles: dict[Path, object] = {}

        def read(name: str, shape: tuple[int, ...]) -> np.ndarray:
            if name not in files:
                raise ValueError(f"{folder}: tensor {name!r} is missing from the checkpoint")
            file = files[name]
            if file not in handles:
                handles[file] = stack.enter_context(_open_safetensors(file))
            try:
                tensor = handles[file].get_tensor(name)
            except SafetensorError as e:
                raise ValueError(f"{file}: tensor {name!r} cannot be read ({e}); the file may "
                                 "be truncated or corrupt") from None
            unused.discard(name)
            return _checked(file, name, tensor, shape)

        params = _read_params(cfg, dtype, prefix, read, place)
    if unused:
        warnings.warn(f"{folder}: {len(unused)} tensors of the checkpoint are not used by the "
                      f"{cfg.model_type} model and were ignored: {sorted(unused)[:8]}",
                      stacklevel=2)
    return cfg, params


def _checked(file: Path, name: str, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if not np.issubdtype(x.dtype, np.floating) and x.dtype.name != "bfloat16":
        raise ValueError(f"{file.name}: tensor {name!r} has dtype {x.dtype}; only floating "
                         "point weights can be loaded (quantized checkpoints are not supported)")
    if tuple(x.shape) != shape:
        raise ValueError(f"{file.name}: tensor {name!r} has shape {tuple(x.shape)}, "
                         f"expected {shape}")
    return x


def _read_params(cfg: QwenConfig, dtype, prefix: str, read, place):
    """The params pytree from `read(hf_name, hf_shape)`, converted and placed."""
    def convert(name: str, shape: tuple[int, ...], layout: str) -> np.ndarray:
        return LAYOUTS[layout].load(read(name, LAYOUTS[layout].hf_shape(shape)), shape)

    desc = describe(cfg, dtype)
    params: dict = {}
    for key, (name, layout) in TOP_NAMES.items():
        params[key] = place(key, convert(prefix + name, desc[key].shape, layout).astype(dtype))
    if "lm_head" in desc:
        params["lm_head"] = place("lm_head", convert(LM_HEAD, desc["lm_head"].shape, "linear")
                                  .astype(dtype))
    for group in ("layers", "attn", "linear"):
        if group not in desc:
            continue
        params[group] = {}
        for key, info in desc[group].items():
            name, layout = names_of(cfg, group)[key]
            stacked = np.stack([convert(f"{prefix}layers.{i}.{name}", info.shape[1:], layout)
                                for i in layer_indices(cfg, group)]).astype(dtype)
            params[group][key] = place(f"{group}.{key}", stacked)
    return params


def to_hf_tensors(cfg: QwenConfig, params) -> dict[str, np.ndarray]:
    """Our params pytree (or a pytree of the same structure, e.g. gradients) as Hugging Face
    tensors of the text model, name -> numpy array.

    Raises:
      ValueError: params in a per-layer layout (`unstack_layers`, `sampler.sampling_params`).
    """
    if any(isinstance(params.get(group), tuple) for group in ("layers", "attn", "linear")):
        raise ValueError("params: per-layer (unstacked) layout; save the params as loaded")
    tensors: dict[str, np.ndarray] = {}
    for key, (name, layout) in TOP_NAMES.items():
        tensors[TEXT_PREFIX + name] = LAYOUTS[layout].save(np.asarray(params[key]))
    if not cfg.tie_word_embeddings:
        tensors[LM_HEAD] = LAYOUTS["linear"].save(np.asarray(params["lm_head"]))
    for group in ("layers", "attn", "linear"):
        if group not in params:
            continue
        table = names_of(cfg, group)
        for j, i in enumerate(layer_indices(cfg, group)):
            for key, (name, layout) in table.items():
                if key in params[group] and LAYOUTS[layout].save is not None:
                    tensors[f"{TEXT_PREFIX}layers.{i}.{name}"] = LAYOUTS[layout].save(
                        np.asarray(params[group][key][j]))
            if group == "attn" and cfg.attn_output_gate:
                tensors[f"{TEXT_PREFIX}layers.{i}.{GATED_Q['q'][0]}"] = gated_q_to_hf(
                    np.asarray(params["attn"]["q"][j]), np.asarray(params["attn"]["q_gate"][j]))
    return tensors


def save(folder: str | Path, cfg: QwenConfig, params) -> None:
    """Writes `config.json` and `model.safetensors` in the Hugging Face (text model) layout.

    Raises:
      ValueError: params in a per-layer layout (`unstack_layers`, `sampler.sampling_params`).
    """
    tensors = to_hf_tensors(cfg, params)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, folder / SINGLE,
              metadata={"format": "pt"})
    hf_config = {**to_hf_config(cfg), "torch_dtype": str(np.asarray(params["embed"]).dtype)}
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2))
