"""Qwen LLMs as pure functions over parameter pytrees (`models.qwen`).

Qwen2/2.5, Qwen3 and Qwen3.5 (hybrid Gated DeltaNet) with Hugging Face checkpoints, a KV-cache
sampler, sharding rules, and agent conversations rendered with the model's chat template.
"""
