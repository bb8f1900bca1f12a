"""Mesh construction, multi-host initialisation and TPU VM launch scripts.

Not implemented yet; planned with the learner (see README, "Status").
"""
