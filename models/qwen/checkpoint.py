"""Hugging Face checkpoint folders <-> our params pytree.

A folder holds `config.json` and either `model.safetensors` or sharded `*.safetensors` with
`model.safetensors.index.json`. Every tensor is checked against the shape `describe(cfg)`
implies before it is converted (HF linears are `[out, in]`; ours are input-major with heads as
their own axis) and cast to the target dtype, one tensor at a time, then placed with the given
shardings. Saving writes a folder `transformers` loads back (`from_pretrained`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from models.qwen.config import QwenConfig, from_hf_config, to_hf_config
from models.qwen.params import describe

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"

# our layer weight -> (HF name inside `model.layers.{i}.`, layout)
LAYER_NAMES = {
    "attn_norm": ("input_layernorm.weight", "vector"),
    "q": ("self_attn.q_proj.weight", "in_heads"),
    "k": ("self_attn.k_proj.weight", "in_heads"),
    "v": ("self_attn.v_proj.weight", "in_heads"),
    "o": ("self_attn.o_proj.weight", "out_heads"),
    "q_bias": ("self_attn.q_proj.bias", "heads"),
    "k_bias": ("self_attn.k_proj.bias", "heads"),
    "v_bias": ("self_attn.v_proj.bias", "heads"),
    "o_bias": ("self_attn.o_proj.bias", "vector"),
    "q_norm": ("self_attn.q_norm.weight", "vector"),
    "k_norm": ("self_attn.k_norm.weight", "vector"),
    "mlp_norm": ("post_attention_layernorm.weight", "vector"),
    "gate": ("mlp.gate_proj.weight", "linear"),
    "up": ("mlp.up_proj.weight", "linear"),
    "down": ("mlp.down_proj.weight", "linear"),
}
TOP_NAMES = {
    "embed": ("model.embed_tokens.weight", "vector"),
    "norm": ("model.norm.weight", "vector"),
    "lm_head": ("lm_head.weight", "linear"),
}


def _hf_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """HF shape of one of our (per-layer) arrays."""
    if layout == "in_heads":  # ours [d, h, e], HF [h*e, d]
        return (shape[1] * shape[2], shape[0])
    if layout == "out_heads":  # ours [h, e, d], HF [d, h*e]
        return (shape[2], shape[0] * shape[1])
    if layout == "heads":  # ours [h, e], HF [h*e]
        return (shape[0] * shape[1],)
    if layout == "linear":  # ours [in, out], HF [out, in]
        return (shape[1], shape[0])
    return shape


def from_hf(x: np.ndarray, shape: tuple[int, ...], layout: str) -> np.ndarray:
    """An HF tensor in our layout of `shape`."""
    if layout in ("in_heads", "out_heads", "linear"):
        return x.T.reshape(shape)
    return x.reshape(shape)


def to_hf(x: np.ndarray, layout: str) -> np.ndarray:
    """One of our arrays in the HF layout."""
    if layout == "in_heads":
        return x.reshape(x.shape[0], -1).T
    if layout == "out_heads":
        return x.reshape(-1, x.shape[-1]).T
    if layout == "heads":
        return x.reshape(-1)
    if layout == "linear":
        return x.T
    return x


def _tensor_files(folder: Path) -> dict[str, Path]:
    """HF tensor name -> the safetensors file holding it."""
    if (folder / INDEX).exists():
        weight_map = json.loads((folder / INDEX).read_text())["weight_map"]
        return {name: folder / file for name, file in weight_map.items()}
    if (folder / SINGLE).exists():
        with safe_open(folder / SINGLE, framework="numpy") as f:
            return {name: folder / SINGLE for name in f.keys()}
    raise FileNotFoundError(f"{folder}: no {SINGLE} and no {INDEX}")


def read_config(folder: str | Path) -> QwenConfig:
    """The QwenConfig of a checkpoint folder."""
    path = Path(folder) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    return from_hf_config(json.loads(path.read_text()))


def load(folder: str | Path, dtype=jnp.float32,
         place: Callable[[str, np.ndarray], jax.Array] | None = None):
    """Loads a checkpoint folder.

    Args:
      folder: a local Hugging Face model folder.
      dtype: target parameter dtype.
      place: optional (our path "layers.q", numpy array) -> device array, e.g. a
        `jax.device_put` with the array's sharding; default `jnp.asarray`.

    Returns:
      (QwenConfig, params pytree).

    Raises:
      FileNotFoundError: missing folder, config or weights file.
      ValueError: a missing tensor or a shape mismatch, naming the tensor and its file.
    """
    folder = Path(folder)
    cfg = read_config(folder)
    files = _tensor_files(folder)
    place = place or (lambda path, x: jnp.asarray(x))
    handles: dict[Path, object] = {}

    def read(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in files:
            raise ValueError(f"{folder}: tensor {name!r} is missing from the checkpoint")
        file = files[name]
        if file not in handles:
            handles[file] = safe_open(file, framework="numpy").__enter__()
        x = handles[file].get_tensor(name)
        if tuple(x.shape) != shape:
            raise ValueError(f"{file.name}: tensor {name!r} has shape {tuple(x.shape)}, "
                             f"expected {shape}")
        return x

    desc = describe(cfg, dtype)
    params: dict = {"layers": {}}
    for key, info in desc.items():
        if key == "layers":
            continue
        name, layout = TOP_NAMES[key]
        x = read(name, _hf_shape(info.shape, layout))
        params[key] = place(key, from_hf(x, info.shape, layout).astype(info.dtype))
    for key, info in desc["layers"].items():
        name, layout = LAYER_NAMES[key]
        per_layer = info.shape[1:]
        stacked = np.stack([
            from_hf(read(f"model.layers.{i}.{name}", _hf_shape(per_layer, layout)), per_layer,
                    layout).astype(info.dtype)
            for i in range(cfg.num_layers)])
        params["layers"][key] = place(f"layers.{key}", stacked)
    for handle in handles.values():
        handle.__exit__(None, None, None)
    return cfg, params


def save(folder: str | Path, cfg: QwenConfig, params) -> None:
    """Writes `config.json` and `model.safetensors` in the Hugging Face layout."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, np.ndarray] = {}
    desc = describe(cfg)
    for key in desc:
        if key == "layers":
            continue
        name, layout = TOP_NAMES[key]
        tensors[name] = to_hf(np.asarray(params[key]), layout)
    for key in desc["layers"]:
        name, layout = LAYER_NAMES[key]
        stacked = np.asarray(params["layers"][key])
        for i in range(cfg.num_layers):
            tensors[f"model.layers.{i}.{name}"] = to_hf(stacked[i], layout)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, folder / SINGLE,
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(to_hf_config(cfg), indent=2))

