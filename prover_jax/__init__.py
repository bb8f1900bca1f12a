"""ProVer-JAX: agentic RL for LLMs with fine-grained credit assignment.

`prover_jax.batch` defines the padded token batch; `prover_jax.credit` holds the jitted credit
kernels and the credit-method registry. The names below load at first use (`prover_jax.lazy`),
so importing the package loads no JAX.
"""

import os

from prover_jax.lazy import exports

# transformers advises at import that PyTorch is missing, which is how this package runs: only
# its tokenizers and configs are used. Its real warnings stay on.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

__all__ = [
    "Batch", "Message", "TokenStream", "Trajectory", "credit", "pack", "pack_streams",
    "trajectory_from_tokens", "validate",
]
__getattr__ = exports(__name__, {"credit": "credit", **{
    name: "batch" for name in __all__ if name != "credit"}})
__version__ = "0.1.0"
