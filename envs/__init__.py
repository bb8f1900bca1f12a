"""Restorable agent environments with instrumented terminal verifiers.

Not implemented yet: the environment protocol, household / webshop / searchqa / tau environments
and the worker pool are planned work (see README, "Status").
"""
