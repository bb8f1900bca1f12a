"""Qwen2/2.5, Qwen3 and Qwen3.5 text models as pure functions over parameter pytrees.

Not implemented yet: forward pass, checkpoint loading, tokenizer/chat template and sampler are
planned work (see README, "Status").
"""
