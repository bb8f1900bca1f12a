"""Model configuration for the Qwen2/2.5, Qwen3 and Qwen3.5 text families.

Qwen3.5 interleaves Gated DeltaNet (linear attention) layers with gated full-attention layers
as `layer_types` says (3:1 in the released models).

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

ModelType = Literal["qwen2", "qwen3", "qwen3_5"]
SUPPORTED_ROPE = ("default", "linear")
FULL, LINEAR = "full_attention", "linear_attention"


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
    # Qwen3.5: hybrid Gated DeltaNet / gated full attention
    layer_types: tuple[str, ...] = ()  # empty: every layer is full attention
    partial_rotary_factor: float = 1.0  # fraction of the head dim that rotates
    attn_output_gate: bool = False  # sigmoid gate on the attention output, packed in q_proj
    norm_plus_one: bool = False  # RMSNorm scales by (1 + w), zero-initialised
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                             f"num_kv_heads={self.num_kv_heads}")
        if self.rope_type not in SUPPORTED_ROPE:
            raise ValueError(f"rope scaling {self.rope_type!r} is not supported; "
                             f"supported: {SUPPORTED_ROPE}")
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for "
                             f"{self.num_layers} layers")
        unknown = set(self.layer_types) - {FULL, LINEAR}
        if unknown:
            raise ValueError(f"layer_types: unknown kinds {sorted(unknown)}")
        if LINEAR in self.layer_types and (
                self.linear_num_value_heads % max(self.linear_num_key_heads, 1)):
            raise ValueError("linear_num_value_heads must be a multiple of linear_num_key_heads")

    @property
    def kinds(self) -> tuple[str, ...]:
        """The mixer of every layer: full_attention or linear_attention."""
        return self.layer_types or (FULL,) * self.num_layers

    @property
    def pattern(self) -> tuple[str, ...]:
        """The shortest prefix of `kinds` that tiles all layers; the forward scans over tiles."""
        kinds = self.kinds
        for period in range(1, len(kinds) + 1):
            if len(kinds) % period == 0 and kinds == kinds[:period] * (len(kinds) // period):
                return kinds[:period]
        return kinds

    @property
    def num_full(self) -> int:
        return self.kinds.count(FULL)

    @property
    def num_linear(self) -> int:
        return self.kinds.count(LINEAR)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the DeltaNet's depthwise conv: q, k and v."""
        return (2 * self.linear_num_key_heads * self.linear_key_head_dim
                + self.linear_num_value_heads * self.linear_value_head_dim)


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


MODEL_TYPES = ("qwen2", "qwen3", "qwen3_5", "qwen3_5_text")


def from_hf_config(hf: Mapping[str, Any]) -> QwenConfig:
    """Builds a QwenConfig from a Hugging Face config dict.

    Accepts `qwen2`, `qwen3`, `qwen3_5_text` and the vision-language `qwen3_5` (whose
    `text_config` describes the language model; the vision tower is not used).

    Raises:
      ValueError: unsupported `model_type`, rope scaling kind, sliding-window attention, or a
        missing field, naming it.
    """
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"config.json: model_type {model_type!r} is not supported; "
                         f"supported: {MODEL_TYPES}")
    if model_type == "qwen3_5":
        text = _require(hf, "text_config")
        # the vision-language model ties by its own top-level flag, as transformers does
        tied = hf.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        hf = {**text, "model_type": "qwen3_5_text", "tie_word_embeddings": tied}
        model_type = "qwen3_5_text"
    if model_type == "qwen3_5_text" and hf.get("attention_bias"):
        raise ValueError("config.json: attention_bias=true is not supported for qwen3_5")
    if hf.get("use_sliding_window"):
        raise ValueError("config.json: use_sliding_window=true is not supported")
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(f"config.json: hidden_act {hf['hidden_act']!r} is not supported")
    heads = _require(hf, "num_attention_heads")
    hidden = _require(hf, "hidden_size")
    theta, rope_type, factor = _rope(hf)
    hybrid = model_type == "qwen3_5_text"
    params = hf.get("rope_parameters") or {}
    extra = {} if not hybrid else dict(
        layer_types=tuple(_require(hf, "layer_types")),
        partial_rotary_factor=float(params.get("partial_rotary_factor",
                                               hf.get("partial_rotary_factor", 0.25))),
        attn_output_gate=True, norm_plus_one=True,
        linear_num_key_heads=_require(hf, "linear_num_key_heads"),
        linear_num_value_heads=_require(hf, "linear_num_value_heads"),
        linear_key_head_dim=_require(hf, "linear_key_head_dim"),
        linear_value_head_dim=_require(hf, "linear_value_head_dim"),
        linear_conv_kernel=_require(hf, "linear_conv_kernel_dim"))
    return QwenConfig(
        model_type="qwen3_5" if hybrid else model_type,
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
        attention_bias=bool(hf.get("attention_bias", False)) and model_type != "qwen2",
        qk_norm=model_type != "qwen2",
        max_position_embeddings=hf.get("max_position_embeddings", 32768),
        **extra,
    )


def to_hf_config(cfg: QwenConfig) -> dict[str, Any]:
    """The `config.json` dict transformers needs to rebuild the same model."""
    rope: dict[str, Any] = {"rope_theta": cfg.rope_theta, "rope_type": cfg.rope_type}
    if cfg.rope_type != "default":
        rope["factor"] = cfg.rope_factor
    names = {"qwen2": ("qwen2", "Qwen2ForCausalLM"), "qwen3": ("qwen3", "Qwen3ForCausalLM"),
             "qwen3_5": ("qwen3_5_text", "Qwen3_5ForCausalLM")}
    model_type, architecture = names[cfg.model_type]
    hf = {
        "model_type": model_type,
        "architectures": [architecture],
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
    if cfg.model_type != "qwen2":
        hf["attention_bias"] = cfg.attention_bias
    if cfg.model_type == "qwen3_5":
        rope["partial_rotary_factor"] = cfg.partial_rotary_factor
        hf.update(layer_types=list(cfg.layer_types),
                  linear_num_key_heads=cfg.linear_num_key_heads,
                  linear_num_value_heads=cfg.linear_num_value_heads,
                  linear_key_head_dim=cfg.linear_key_head_dim,
                  linear_value_head_dim=cfg.linear_value_head_dim,
                  linear_conv_kernel_dim=cfg.linear_conv_kernel)
    return hf
