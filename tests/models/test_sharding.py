"""Sharding rules on 8 fake CPU devices: placement is real, and sharded logits are within the
float32 budget of transformers' float64 ones (tests/models/budget.py), as the unsharded are."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from models import qwen
from models.qwen.sharding import describe_placement, param_shardings, spec_for
from tests.models.budget import Reference
from tpu.mesh import LEARNER_RULES, SAMPLER_RULES, MeshConfig, build_mesh, from_process_local

CFG = qwen.QwenConfig(model_type="qwen3", vocab_size=128, hidden_size=64, intermediate_size=96,
                      num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True)


def reference_of(cfg, params, folder) -> Reference:
    """transformers' model of our params (through a saved checkpoint), float32 and float64."""
    import transformers

    qwen.save(folder, cfg, params)
    return Reference(transformers.AutoModelForCausalLM.from_pretrained(folder))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if jax.device_count() < 8:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8")
    params = qwen.init(CFG, jax.random.key(0), scale=0.1)
    tokens = np.random.default_rng(0).integers(0, 128, (4, 10)).astype(np.int32)
    positions = np.broadcast_to(np.arange(10), (4, 10)).astype(np.int32)
    unsharded, _ = jax.jit(qwen.forward, static_argnums=1)(params, CFG, tokens, positions)
    reference = reference_of(CFG, params, tmp_path_factory.mktemp("sharding"))
    reference.assert_logits(unsharded, tokens)
    return params, tokens, positions, reference


@pytest.mark.parametrize("rules", [LEARNER_RULES, SAMPLER_RULES], ids=["learner", "sampler"])
def test_sharded_forward_equals_unsharded(setup, rules):
    params, tokens, positions, reference = setup
    mesh = build_mesh(MeshConfig(fsdp=2, model=4))
    sharded = jax.device_put(params, param_shardings(CFG, mesh, rules))
    placement = describe_placement(sharded)
    # q [layers, d, h, e]: heads split 4 ways (and d 2 ways for the learner); not a no-op
    assert placement["attn.q"].endswith("(2, 32, 1, 16)" if rules is LEARNER_RULES
                                          else "(2, 64, 1, 16)")
    assert placement["attn.k"].endswith("(2, 32, 2, 16)" if rules is LEARNER_RULES
                                          else "(2, 64, 2, 16)")  # 2 kv heads: replicated
    tokens_s, positions_s = from_process_local(mesh, (tokens, positions))
    logits, _ = jax.jit(qwen.forward, static_argnums=1)(sharded, CFG, tokens_s, positions_s)
    assert len(logits.sharding.device_set) == 8
    reference.assert_logits(np.asarray(logits), tokens)  # as the unsharded logits are


def test_hybrid_model_sharded_forward_equals_unsharded(tmp_path):
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    cfg = qwen.QwenConfig(
        model_type="qwen3_5", vocab_size=128, hidden_size=64, intermediate_size=96, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True, partial_rotary_factor=0.5,
        attn_output_gate=True, norm_plus_one=True, layer_types=("linear_attention",
                                                                "full_attention"),
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, linear_conv_kernel=4)
    params = qwen.init(cfg, jax.random.key(1), scale=0.1)
    tokens = np.random.default_rng(1).integers(0, 128, (4, 10)).astype(np.int32)
    positions = np.broadcast_to(np.arange(10), (4, 10)).astype(np.int32)
    run = jax.jit(qwen.forward, static_argnums=1)
    expected, _ = run(params, cfg, tokens, positions)
    mesh = build_mesh(MeshConfig(fsdp=2, model=4))
    sharded = jax.device_put(params, param_shardings(cfg, mesh, LEARNER_RULES))
    assert describe_placement(sharded)["linear.z"].endswith("(1, 32, 1, 8)")
    logits, _ = run(sharded, cfg, *from_process_local(mesh, (tokens, positions)))
    reference = reference_of(cfg, params, tmp_path)
    reference.assert_logits(np.asarray(expected), tokens)
    reference.assert_logits(np.asarray(logits), tokens)


def _is_info(x):
    return isinstance(x, qwen.ArrayInfo)


def test_abstract_params_match_init():
    shapes = jax.tree.map(lambda x: (x.shape, x.dtype), qwen.init(CFG, jax.random.key(0)))
    abstract = jax.tree.map(lambda x: (x.shape, x.dtype), qwen.abstract(CFG))
    assert shapes == abstract
    assert qwen.abstract(CFG, jax.numpy.bfloat16)["attn"]["q"].dtype == jax.numpy.bfloat16
    host = qwen.init_numpy(CFG, seed=1)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), host) == shapes
    norms = [x for info, x in zip(jax.tree.leaves(qwen.describe(CFG), is_leaf=_is_info),
                                  jax.tree.leaves(host)) if info.init == "ones"]
    assert norms and all((x == 1).all() for x in norms)


def test_collisions_and_unknown_axes_are_errors():
    mesh = build_mesh(MeshConfig(fsdp=2, model=4))
    info = qwen.describe(CFG)["layers"]["gate"]  # axes (layers, embed, mlp)
    with pytest.raises(ValueError, match=r"layers\.gate: axes .* map twice"):
        spec_for("layers.gate", info, {**LEARNER_RULES, "embed": "model"}, mesh)
    with pytest.raises(ValueError, match="no sharding rule"):
        spec_for("layers.gate", info, {"layers": None}, mesh)
