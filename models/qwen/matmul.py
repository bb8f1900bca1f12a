"""The projection every layer uses: a matmul over the flattened leading axes."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def dense(x: jax.Array, w: jax.Array, axes: int = 1,
          preferred_element_type=None) -> jax.Array:
    """Contracts the last `axes` axes of x with the first `axes` axes of w.

    Computed as one [rows, K] @ [K, N] matmul. In the backward pass XLA:CPU then computes the
    weight gradient from the activations as they are; with [B, L, D] operands it transposed the
    activation gradients first, slowly (14% of a 4-layer model's forward + backward on CPU).

    Args:
      x: [..., *w.shape[:axes]].
      w: [K1, ..., Kaxes, *out].
      axes: how many axes are contracted.
      preferred_element_type: the accumulation / result dtype (None: the operands').

    Returns:
      [..., *w.shape[axes:]].
    """
    batch = x.shape[:x.ndim - axes]
    inner = math.prod(w.shape[:axes])
    out = jnp.matmul(x.reshape(-1, inner), w.reshape(inner, -1),
                     preferred_element_type=preferred_element_type)
    return out.reshape(*batch, *w.shape[axes:])
