"""Qwen LLMs as pure functions over parameter pytrees (`models.qwen`).

Qwen2/2.5 and Qwen3 are implemented; Qwen3.5 (Gated DeltaNet), the tokenizer/chat template,
the sampler and sharding rules are planned (see README, "Status").
"""
