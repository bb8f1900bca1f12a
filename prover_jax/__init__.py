"""ProVer-JAX: agentic RL for LLMs with fine-grained credit assignment.

`prover_jax.batch` defines the padded token batch; `prover_jax.credit` holds the jitted credit
kernels and the credit-method registry.
"""

import os

# transformers advises at import that PyTorch is missing, which is how this package runs: only
# its tokenizers and configs are used. Its real warnings stay on.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

from prover_jax import credit
from prover_jax.batch import (
    Batch,
    Message,
    TokenStream,
    Trajectory,
    pack,
    pack_streams,
    trajectory_from_tokens,
    validate,
)

__all__ = [
    "Batch", "Message", "TokenStream", "Trajectory", "credit", "pack", "pack_streams",
    "trajectory_from_tokens", "validate",
]
__version__ = "0.1.0"
