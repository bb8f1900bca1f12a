"""Qwen2/2.5, Qwen3 and Qwen3.5 text models: config, parameter description, forward pass,
checkpoints, sampler, sharding rules, tokenizer and chat rendering."""

from models.qwen.checkpoint import load, read_config, save
from models.qwen.config import QwenConfig, from_hf_config, to_hf_config
from models.qwen.model import (
    Cache,
    check_token_ids,
    forward,
    init_cache,
    lm_head,
    positions_from_mask,
    unstack_layers,
)
from models.qwen.params import ArrayInfo, abstract, describe, init, init_numpy

__all__ = [
    "ArrayInfo",
    "Cache",
    "QwenConfig",
    "abstract",
    "check_token_ids",
    "describe",
    "forward",
    "from_hf_config",
    "init",
    "init_cache",
    "init_numpy",
    "lm_head",
    "load",
    "positions_from_mask",
    "read_config",
    "save",
    "to_hf_config",
    "unstack_layers",
]
