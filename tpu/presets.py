"""The papers' models as Hugging Face ``config.json`` fields: what `tpu.plan` and `tpu.compile`
plan and compile before any weights are on disk, and what a recipe names as its
``architecture``. Imports nothing heavy, so that settings can be checked before JAX loads."""

from __future__ import annotations

from collections.abc import Mapping


def _qwen2(vocab, hidden, inter, layers, heads, kv, tied):
    return {"model_type": "qwen2", "vocab_size": vocab, "hidden_size": hidden,
            "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv,
            "tie_word_embeddings": tied}


def _qwen3(vocab, hidden, inter, layers, heads, kv, tied):
    return {**_qwen2(vocab, hidden, inter, layers, heads, kv, tied), "model_type": "qwen3",
            "head_dim": 128}


def _qwen3_5(hidden, inter, layers, heads, kv, linear_k, linear_v, tied):
    return {"model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": hidden,
            "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 256,
            "tie_word_embeddings": tied, "partial_rotary_factor": 0.25,
            "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                            for i in range(layers)],
            "linear_num_key_heads": linear_k, "linear_num_value_heads": linear_v,
            "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4}


PRESETS: Mapping[str, dict] = {
    "qwen2.5-1.5b": _qwen2(151936, 1536, 8960, 28, 12, 2, True),
    "qwen2.5-7b": _qwen2(152064, 3584, 18944, 28, 28, 4, False),
    "qwen3-0.6b": _qwen3(151936, 1024, 3072, 28, 16, 8, True),
    "qwen3-8b": _qwen3(151936, 4096, 12288, 36, 32, 8, False),
    "qwen3.5-2b": _qwen3_5(2048, 6144, 24, 8, 2, 16, 16, True),
    "qwen3.5-4b": _qwen3_5(2560, 9216, 32, 16, 4, 16, 32, True),
}


def check_preset(name: str) -> None:
    """Raises ValueError unless `name` is one of `PRESETS`."""
    if name not in PRESETS:
        raise ValueError(f"unknown architecture {name!r}; the presets: {', '.join(PRESETS)}")
