"""tpu.mesh on 8 fake CPU devices: mesh sizes and their errors, tensor-parallel greedy decoding
equal to unsharded, and the learner -> sampler reshard done on the devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import qwen
from models.qwen.sampler import generate
from models.qwen.sharding import describe_placement, param_shardings
from tpu.mesh import (
    LEARNER_RULES,
    SAMPLER_RULES,
    MeshConfig,
    batch_shards,
    build_mesh,
    cache_shardings,
    from_process_local,
    to_sampler,
)
from tpu.mesh_config import parse

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (fake CPU) devices")

CONFIGS = {
    "qwen3": qwen.QwenConfig(model_type="qwen3", vocab_size=128, hidden_size=64,
                             intermediate_size=96, num_layers=2, num_heads=4, num_kv_heads=2,
                             head_dim=16, qk_norm=True),
    "qwen3_5": qwen.QwenConfig(
        model_type="qwen3_5", vocab_size=128, hidden_size=64, intermediate_size=96, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True, partial_rotary_factor=0.5,
        attn_output_gate=True, norm_plus_one=True,
        layer_types=("linear_attention", "full_attention"), linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
        linear_conv_kernel=4),
}
NEW_TOKENS = 8


def test_sizes_resolve_and_bad_sizes_name_the_problem():
    assert MeshConfig(fsdp=-1, model=2).shape(8) == {"data": 1, "fsdp": 4, "model": 2}
    assert MeshConfig().shape(8) == {"data": 1, "fsdp": 1, "model": 1}  # the first device
    mesh = build_mesh(MeshConfig(data=2, fsdp=-1, model=2))
    assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "model": 2} and batch_shards(mesh) == 4
    with pytest.raises(ValueError, match=r"fixed axes \(3 devices\) do not divide the 8"):
        MeshConfig(fsdp=-1, model=3).shape(8)
    with pytest.raises(ValueError, match="needs 16 devices; 8 are present"):
        build_mesh(MeshConfig(fsdp=4, model=4))
    with pytest.raises(ValueError, match="-1 for one axis at most"):
        MeshConfig(data=-1, fsdp=-1)
    with pytest.raises(ValueError, match=">= 1"):
        MeshConfig(model=0)


def test_parse_reads_what_describe_writes():
    config = MeshConfig(data=2, fsdp=-1, model=4)
    assert parse(config.describe()) == config
    assert parse("model=2") == MeshConfig(model=2)
    with pytest.raises(ValueError, match="'tensor' is unknown"):
        parse("tensor=2")
    with pytest.raises(ValueError, match="'fsdp' is not an integer"):
        parse("fsdp=four")


def greedy(params, cfg, tokens, positions, mesh=None):
    """Greedy decoding; with a mesh, the cache's rows over its batch axes."""
    cache = qwen.init_cache(cfg, tokens.shape[0], tokens.shape[1] + NEW_TOKENS)
    if mesh is not None:
        cache = jax.device_put(cache, cache_shardings(cache, mesh))
        assert cache.valid.addressable_shards[0].data.shape[0] == tokens.shape[0] // 2
    return generate(params, cfg, tokens, positions, cache, jax.random.key(0),
                    max_tokens=NEW_TOKENS, max_new_tokens=jnp.int32(NEW_TOKENS),
                    stop_tokens=jnp.array([-1], jnp.int32), temperature=jnp.float32(0.0))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_tensor_parallel_greedy_decode_equals_unsharded(name):
    cfg = CONFIGS[name]
    params = qwen.init(cfg, jax.random.key(3), scale=0.5)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, cfg.vocab_size, (4, 6)).astype(np.int32)
    mask = np.ones(tokens.shape, bool)
    mask[1, :3] = False  # left padding
    tokens = np.where(mask, tokens, 0)
    positions = np.asarray(qwen.positions_from_mask(mask))
    expected = greedy(params, cfg, tokens, positions)
    mesh = build_mesh(MeshConfig(data=2, model=4))
    sharded = jax.device_put(params, param_shardings(cfg, mesh, SAMPLER_RULES))
    key = "attn.q" if name == "qwen3" else "linear.z"
    assert describe_placement(sharded)[key].split(" / ")[1] != \
        describe_placement(params)[key].split(" / ")[1]  # heads really are split
    got = greedy(sharded, cfg, *from_process_local(mesh, (tokens, positions)), mesh)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(expected.tokens))
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(expected.logprobs),
                               atol=1e-5)


def test_learner_weights_reshard_to_the_sampler_on_the_devices():
    cfg = CONFIGS["qwen3"]
    mesh = build_mesh(MeshConfig(fsdp=4, model=2))
    learner = jax.device_put(qwen.init(cfg, jax.random.key(0)),
                             param_shardings(cfg, mesh, LEARNER_RULES))
    assert learner["layers"]["gate"].addressable_shards[0].data.shape == (2, 16, 48)
    with jax.transfer_guard_device_to_host("disallow"), \
            jax.transfer_guard_host_to_device("disallow"):
        sampler = to_sampler(learner, cfg, mesh)
    expected = param_shardings(cfg, mesh, SAMPLER_RULES)
    for got, want, before in zip(jax.tree.leaves(sampler), jax.tree.leaves(expected),
                                 jax.tree.leaves(learner)):
        assert got.sharding == want
        np.testing.assert_array_equal(np.asarray(got), np.asarray(before))
    assert sampler["layers"]["gate"].addressable_shards[0].data.shape == (2, 64, 48)
