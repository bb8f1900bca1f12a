"""Trace-time shape and dtype checks that name the offending array.

Every public kernel calls `check_arrays` first. The checks run while JAX traces the function, so
they cost nothing at run time and fail before any compilation with a `ValueError` that says which
argument is wrong, what was expected and what arrived.

Shape specs are strings of dimension letters (the glossary of SPEC.md §0: b rows, l tokens,
t turns, m atoms, g trees, n tree nodes, s segments); a letter used twice must have the same size
everywhere, a digit demands that exact size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

_KIND_NAMES = {"b": "bool", "i": "an integer dtype", "f": "a floating dtype"}


def _kind_of(dtype: Any) -> str:
    kind = np.dtype(dtype).kind
    if kind == "u":
        return "i"
    if kind == "V":  # bfloat16 and other ml_dtypes floats report a void kind
        return "f"
    return kind


def check_arrays(specs: Mapping[str, tuple[Any, str, str]]) -> dict[str, int]:
    """Checks ranks, shared dimension sizes and dtype kinds of named arrays.

    Args:
      specs: name -> (array, shape spec such as "b t", dtype kind "b" | "i" | "f" | "" for any).

    Returns:
      The size bound to every dimension letter, e.g. {"b": 128, "t": 64}.

    Raises:
      ValueError: naming the first array whose rank, a dimension or dtype kind is wrong.
    """
    dims: dict[str, int] = {}
    where: dict[str, str] = {}
    for name, (array, spec, kind) in specs.items():
        letters = spec.split()
        shape = tuple(np.shape(array))
        if len(shape) != len(letters):
            raise ValueError(
                f"{name}: expected rank {len(letters)} [{', '.join(letters).upper()}], "
                f"got shape {shape}"
            )
        for letter, size in zip(letters, shape):
            if letter.isdigit():
                if size != int(letter):
                    raise ValueError(f"{name}: dimension must be {letter}, got shape {shape}")
                continue
            if letter in dims and dims[letter] != size:
                raise ValueError(
                    f"{name}: dimension {letter.upper()}={size} does not match "
                    f"{letter.upper()}={dims[letter]} of {where[letter]} (shape {shape})"
                )
            dims.setdefault(letter, size)
            where.setdefault(letter, name)
        dtype = jnp.asarray(array).dtype
        if kind and _kind_of(dtype) != kind:
            raise ValueError(f"{name}: expected {_KIND_NAMES[kind]}, got dtype {dtype}")
    return dims


def check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    """Raises a ValueError naming the option when `value` is not one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
