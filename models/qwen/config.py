"""Model configuration for the Qwen2/2.5, Qwen3 and Qwen3.5 text families.

A frozen dataclass, hashable so it can be a static argument of `jit`. `from_hf_config` reads a
Hugging Face `config.json` dict (transformers 4 and 5 layouts: top-level `rope_theta` /
`rope_scaling` or the newer `rope_parameters`); anything we do not implement is an error that
names the field rather than a silently different model.

Glossary: d model width, h query heads, k kv heads, e head dim, f MLP width, v vocab.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

ModelType = Literal["qwen2", "qwen3"]
SUPPORTED_ROPE = ("default", "linear")


@dataclasses.dataclass(frozen=True)
class QwenConfig:
    """Architecture of one model; every field has the meaning of its HF namesake."""

    model_type: ModelType
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_type: str = "default"
    rope_factor: float = 1.0
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2: bias on q, k, v projections
    attention_bias: bool = False  # Qwen3: bias on q, k, v and o
    qk_norm: bool = False  # Qwen3: RMSNorm over each head of q and k
    max_position_embeddings: int = 32768

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                             f"num_kv_heads={self.num_kv_heads}")
        if self.rope_type not in SUPPORTED_ROPE:
            raise ValueError(f"rope scaling {self.rope_type!r} is not supported; "
                             f"supported: {SUPPORTED_ROPE}")

    @property
    def group_size(self) -> int:
        """Query heads per kv head (GQA)."""
        return self.num_heads // self.num_kv_heads


def _rope(hf: Mapping[str, Any]) -> tuple[float, str, float]:
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    factor = params.get("factor", scaling.get("factor", 1.0))
    if kind not in SUPPORTED_ROPE:
        raise ValueError(f"config.json: rope scaling {kind!r} is not supported; "
                         f"supported: {SUPPORTED_ROPE}")
    return float(theta), kind, float(factor)


def _require(hf: Mapping[str, Any], name: str) -> Any:
    if name not in hf:
        raise ValueError(f"config.json: missing field {name!r}")
    return hf[name]


def from_hf_config(hf: Mapping[str, Any]) -> QwenConfig:
    """Builds a QwenConfig from a Hugging Face config dict.

    Raises:
      ValueError: unsupported `model_type`, rope scaling kind, sliding-window attention, or a
        missing field, naming it.
    """
    model_type = hf.get("model_type")
    if model_type not in ("qwen2", "qwen3"):
        raise ValueError(f"config.json: model_type {model_type!r} is not supported; "
                         "supported: 'qwen2', 'qwen3'")
    if hf.get("use_sliding_window"):
        raise ValueError("config.json: use_sliding_window=true is not supported")
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(f"config.json: hidden_act {hf['hidden_act']!r} is not supported")
    heads = _require(hf, "num_attention_heads")
    hidden = _require(hf, "hidden_size")
    theta, rope_type, factor = _rope(hf)
    return QwenConfig(
        model_type=model_type,
        vocab_size=_require(hf, "vocab_size"),
        hidden_size=hidden,
        intermediate_size=_require(hf, "intermediate_size"),
        num_layers=_require(hf, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hidden // heads,
        rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_type=rope_type,
        rope_factor=factor,
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qkv_bias=model_type == "qwen2",
        attention_bias=bool(hf.get("attention_bias", False)) and model_type == "qwen3",
        qk_norm=model_type == "qwen3",
        max_position_embeddings=hf.get("max_position_embeddings", 32768),
    )


def to_hf_config(cfg: QwenConfig) -> dict[str, Any]:
    """The `config.json` dict transformers needs to rebuild the same model."""
    rope: dict[str, Any] = {"rope_theta": cfg.rope_theta, "rope_type": cfg.rope_type}
    if cfg.rope_type != "default":
        rope["factor"] = cfg.rope_factor
    hf = {
        "model_type": cfg.model_type,
        "architectures": ["Qwen2ForCausalLM" if cfg.model_type == "qwen2" else "Qwen3ForCausalLM"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_parameters": rope,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "max_position_embeddings": cfg.max_position_embeddings,
        "torch_dtype": "float32",
    }
    if cfg.model_type == "qwen3":
        hf["attention_bias"] = cfg.attention_bias
    return hf
