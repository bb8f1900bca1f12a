"""Qwen2 / Qwen3 forward pass against Hugging Face `transformers` (PyTorch, CPU) on tiny models."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file

from models import qwen
from models.qwen.checkpoint import to_hf_tensors
from models.qwen.sampler import generate
from tests.models.budget import Reference, assert_within_budget, budget

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
HYBRID = dict(head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
              linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
              layer_types=["linear_attention", "full_attention"] * 2)
CONFIGS = {
    "qwen2": lambda: transformers.Qwen2Config(**TINY, rope_theta=10000.0),
    "qwen3_5": lambda: transformers.Qwen3_5TextConfig(**{**TINY, "num_hidden_layers": 4},
                                                      **HYBRID),
    "qwen3": lambda: transformers.Qwen3Config(**TINY, head_dim=24, attention_bias=True,
                                              rope_theta=1e6),
    "qwen3-tied": lambda: transformers.Qwen3Config(**TINY, head_dim=16, tie_word_embeddings=True),
}


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Every weight random (norm weights around 1), so no term of the forward pass is trivial."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * 0.1
            p.copy_(1.0 + noise if "norm" in name else noise)


def build(name: str, seed: int, folder):
    """(Reference, our config, our params, folder) of one tiny random model of `CONFIGS`."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[name]()).eval()
    randomise(model, seed)
    model.save_pretrained(folder)
    cfg, params = qwen.load(folder)
    return Reference(model), cfg, params, folder


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny(request, tmp_path_factory):
    return build(request.param, len(request.param), tmp_path_factory.mktemp(request.param))


def hf_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(tokens.astype(np.int64))).logits.numpy()


forward = jax.jit(qwen.forward, static_argnums=1)


def tokens_for(cfg, shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, shape).astype(np.int32)


def assert_logits_match(reference, cfg, params, length: int, seed: int) -> None:
    """Full-sequence fp32 logits of a [2, length] batch within budget of transformers'."""
    tokens = tokens_for(cfg, (2, length), seed)
    positions = np.broadcast_to(np.arange(length), (2, length)).astype(np.int32)
    ours, _ = forward(params, cfg, tokens, positions)
    reference.assert_logits(ours, tokens)


def test_full_sequence_logits_match(tiny):
    reference, cfg, params, _ = tiny
    assert_logits_match(reference, cfg, params, length=12, seed=0)


def test_long_sequence_through_query_blocks_matches(tiny):
    reference, cfg, params, _ = tiny
    # > 256 tokens: two query blocks, the first skipping the second's keys; 5 DeltaNet chunks.
    assert_logits_match(reference, cfg, params, length=300, seed=8)


def test_left_padded_batch_equals_unpadded_rows(tiny):
    reference, cfg, params, _ = tiny
    tokens = tokens_for(cfg, (2, 10), seed=1)
    mask = np.ones((2, 10), bool)
    mask[1, :4] = False  # row 1 is a 6-token sequence, left-padded
    padded, _ = forward(params, cfg, tokens, qwen.positions_from_mask(mask))
    alone, _ = forward(params, cfg, tokens[1:, 4:], np.arange(6, dtype=np.int32)[None])
    reference.assert_logits(padded[1, 4:], tokens, mask, select=(1, slice(4, None)))
    reference.assert_logits(alone[0], tokens[1:, 4:], select=0)


@pytest.mark.parametrize("layout", ["stacked", "unstacked"])
def test_prefill_then_decode_equals_full_forward(tiny, layout):
    reference, cfg, params, _ = tiny
    tokens, positions, mask = decode_inputs(cfg)
    full, _ = forward(params, cfg, tokens, positions)
    cache = qwen.init_cache(cfg, batch=2, max_len=16)
    if layout == "unstacked":  # per-layer weights and kv cache
        params = qwen.unstack_layers(params)
        cache = cache._replace(k=tuple(cache.k), v=tuple(cache.v))
    step = jax.jit(qwen.forward, static_argnums=1)
    logits, cache = step(params, cfg, tokens[:, :7], positions[:, :7], cache)
    pieces = [logits]
    for i in range(7, 11):
        logits, cache = step(params, cfg, tokens[:, i:i + 1], positions[:, i:i + 1], cache)
        pieces.append(logits)
    decoded = np.concatenate(pieces, axis=1)
    reference.assert_logits(decoded[mask], tokens, mask, select=mask)
    reference.assert_logits(np.asarray(full)[mask], tokens, mask, select=mask)
    assert int(cache.length) == 11


def decode_inputs(cfg):
    """tokens, positions and mask of a [2, 11] batch whose first row is left-padded by 3."""
    tokens = tokens_for(cfg, (2, 11), seed=2)
    mask = np.ones((2, 11), bool)
    mask[0, :3] = False
    return tokens, qwen.positions_from_mask(mask), mask


def lse_loss(logits):
    """The test loss: mean log-sum-exp of the logits (every logit gets a gradient)."""
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1))


def reference_gradients(model, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """d lse_loss / d weight of a transformers model, by HF parameter name."""
    model.zero_grad()
    logits = model(torch.tensor(tokens.astype(np.int64))).logits
    torch.logsumexp(logits, dim=-1).mean().backward()
    return {name: p.grad.numpy().copy() for name, p in model.named_parameters()}


def test_gradients_and_unstacked_logits_match_transformers(tiny):
    """Gradients of the stacked (scanned) params within budget of transformers' float64 ones,
    tensor by tensor, and the per-layer (unrolled) layout's logits as well. Per-layer params
    only ever sample, so they need no gradient; rematerialisation is checked by the learner's
    tests against the plain backward pass."""
    reference, cfg, params, _ = tiny
    tokens = tokens_for(cfg, (2, 11), seed=2)
    positions = np.broadcast_to(np.arange(11), (2, 11)).astype(np.int32)

    def loss(p):
        logits, _ = qwen.forward(p, cfg, tokens, positions)
        return lse_loss(logits), logits

    grads, logits = jax.jit(jax.grad(loss, has_aux=True))(params)
    reference.assert_logits(logits, tokens)
    wanted64 = reference_gradients(reference.model64, tokens)
    wanted32 = reference_gradients(reference.model32, tokens)
    ours = to_hf_tensors(cfg, grads)
    tied = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    assert set(ours) == set(wanted64) - tied
    for name, value in ours.items():
        assert_within_budget(value, wanted64[name], wanted32[name], what=name)
    unstacked = qwen.unstack_layers(params)
    assert len(unstacked["layers"]) == cfg.num_layers
    assert unstacked["layers"][0]["gate"].shape == params["layers"]["gate"].shape[1:]
    reference.assert_logits(forward(unstacked, cfg, tokens, positions)[0], tokens)


def test_save_round_trip_loads_in_transformers(tiny, tmp_path):
    reference, cfg, params, _ = tiny
    model = reference.model32
    qwen.save(tmp_path, cfg, params)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tokens = tokens_for(cfg, (1, 9), seed=3)
    np.testing.assert_allclose(hf_logits(reloaded, tokens), hf_logits(model, tokens), atol=1e-6)
    cfg2, params2 = qwen.load(tmp_path)
    assert cfg2 == cfg
    jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_sharded_checkpoint_with_index_and_placement(tiny, tmp_path):
    reference, cfg, params, _ = tiny
    reference.model32.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    placed = []

    def place(path, array):
        placed.append(path)
        return jax.device_put(array, jax.devices()[0])

    cfg2, params2 = qwen.load(tmp_path, place=place)
    assert cfg2 == cfg and "attn.q" in placed and "layers.gate" in placed
    jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_bf16_params_stay_close(tiny):
    reference, cfg, _, folder = tiny
    _, params = qwen.load(folder, dtype=jnp.bfloat16)
    assert params["attn"]["q"].dtype == jnp.bfloat16
    tokens = tokens_for(cfg, (1, 8), seed=4)
    ours, _ = forward(params, cfg, tokens, np.arange(8, dtype=np.int32)[None])
    assert ours.dtype == jnp.float32
    expected = hf_logits(reference.model32, tokens)
    assert np.max(np.abs(ours - expected)) < 0.1 * np.max(np.abs(expected))


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return build("qwen3_5", 11, tmp_path_factory.mktemp("hybrid"))


def test_qwen3_5_long_sequence_uses_chunks_and_matches(hybrid):
    reference, cfg, params, _ = hybrid
    assert_logits_match(reference, cfg, params, length=150, seed=5)  # 3 DeltaNet chunks of 64


def _swap_heads(params):
    q = np.array(params["attn"]["q"])  # [layers, d, h, e]
    q[0, :, [0, 1]] = q[0, :, [1, 0]]
    return {**params, "attn": {**params["attn"], "q": jnp.asarray(q)}}


@pytest.mark.parametrize("defect", ["swapped heads", "no qk norm", "rotary fraction 0.5"])
def test_a_wrong_model_exceeds_the_budget(hybrid, defect):
    """The budget is tight enough to see a one-weight or one-flag defect, by a wide margin."""
    reference, cfg, params, _ = hybrid
    if defect == "swapped heads":
        params = _swap_heads(params)
    else:
        cfg = dataclasses.replace(cfg, **({"qk_norm": False} if defect == "no qk norm"
                                          else {"partial_rotary_factor": 0.5}))
    tokens = tokens_for(cfg, (2, 12), seed=0)
    ours, _ = forward(params, cfg, tokens, np.broadcast_to(np.arange(12), (2, 12)).astype(np.int32))
    with pytest.raises(AssertionError, match="exceeds the float32 budget"):
        reference.assert_logits(ours, tokens)
    reference64, reference32 = reference.logits(tokens)
    assert np.abs(np.asarray(ours) - reference64).max() > 10 * budget(reference64, reference32)


def test_deltanet_chunked_equals_recurrent(hybrid):
    reference, cfg, params, _ = hybrid
    tokens = tokens_for(cfg, (2, 100), seed=6)
    mask = np.ones((2, 100), bool)
    mask[1, :30] = False
    mask[0, 40:45] = False  # a hole in the middle: padding anywhere must be exact
    positions = qwen.positions_from_mask(mask)
    run = jax.jit(qwen.forward, static_argnames=("cfg", "use_chunks"))
    chunked, _ = run(params, cfg, tokens, positions, use_chunks=True)
    recurrent, _ = run(params, cfg, tokens, positions, use_chunks=False)
    compact = tokens[0][mask[0]][None]
    alone, _ = run(params, cfg, compact, np.arange(95, dtype=np.int32)[None])
    for ours in (chunked, recurrent):  # row 0 equals its compact sequence; row 1 is left-padded
        reference.assert_logits(np.asarray(ours)[0][mask[0]], compact, select=0)
        reference.assert_logits(np.asarray(ours)[1][mask[1]], tokens, mask, select=(1, mask[1]))
    reference.assert_logits(alone[0], compact, select=0)


@pytest.mark.parametrize("decay", [0.1, 0.7, 3.0])
def test_delta_rule_forms_agree(decay):
    from models.qwen.deltanet import chunked, l2_normalise, recurrent

    rng = np.random.default_rng(0)
    b, l, h, k, v = 2, 100, 4, 16, 8
    q = l2_normalise(jnp.asarray(rng.normal(size=(b, l, h, k)), jnp.float32)) * k ** -0.5
    keys = l2_normalise(jnp.asarray(rng.normal(size=(b, l, h, k)), jnp.float32))
    values = jnp.asarray(rng.normal(size=(b, l, h, v)), jnp.float32)
    beta = jax.nn.sigmoid(jnp.asarray(rng.normal(size=(b, l, h)), jnp.float32))
    g = -decay * jax.nn.softplus(jnp.asarray(rng.normal(size=(b, l, h)), jnp.float32))
    state = jnp.asarray(rng.normal(size=(b, h, k, v)), jnp.float32)
    out_c, state_c = jax.jit(chunked)(q, keys, values, beta, g, state)
    out_r, state_r = jax.jit(recurrent)(q, keys, values, beta, g, state)
    np.testing.assert_allclose(out_c, out_r, atol=2e-6)
    np.testing.assert_allclose(state_c, state_r, atol=2e-6)


def test_qwen3_5_vision_language_layout_loads_the_language_model(hybrid, tmp_path):
    """The VL checkpoint layout: text weights under model.language_model, vision and MTP
    tensors present but skipped, the text config nested under text_config."""
    from safetensors.numpy import load_file, save_file

    _, cfg, params, folder = hybrid
    tensors = load_file(folder / "model.safetensors")
    renamed = {(k.replace("model.", "model.language_model.", 1) if k.startswith("model.")
                else k): v for k, v in tensors.items()}
    renamed["model.visual.patch_embed.proj.weight"] = np.zeros((4, 3), np.float32)
    renamed["mtp.layers.0.mlp.gate_proj.weight"] = np.zeros((4, 4), np.float32)
    save_file(renamed, tmp_path / "model.safetensors")
    text = json.loads((folder / "config.json").read_text())
    vl = {"model_type": "qwen3_5", "text_config": text, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(vl))
    cfg_vl, params_vl = qwen.load(tmp_path)
    assert cfg_vl == cfg
    jax.tree.map(np.testing.assert_array_equal, params_vl, params)


def test_gradients_flow_through_query_blocks():
    cfg = qwen.QwenConfig(model_type="qwen3", vocab_size=64, hidden_size=32, intermediate_size=48,
                          num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, qk_norm=True)
    params = qwen.init(cfg, jax.random.key(0), scale=0.1)
    tokens = tokens_for(cfg, (1, 300), seed=9)  # > 256 queries: two query blocks
    positions = np.arange(300, dtype=np.int32)[None]

    def loss(p):
        logits, _ = qwen.forward(p, cfg, tokens, positions)
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1))

    grads = jax.jit(jax.grad(loss))(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
    assert float(jnp.abs(grads["attn"]["q"]).max()) > 0


def test_vision_language_config_ties_by_its_top_level_flag():
    text = qwen.to_hf_config(qwen.from_hf_config(CONFIGS["qwen3_5"]().to_dict()))
    vl = {"model_type": "qwen3_5", "tie_word_embeddings": True,
          "text_config": {**text, "tie_word_embeddings": False}}
    assert qwen.from_hf_config(vl).tie_word_embeddings
    with pytest.raises(ValueError, match="attention_bias"):
        qwen.from_hf_config({**text, "attention_bias": True})


def test_config_round_trip_and_errors():
    hf = CONFIGS["qwen3"]().to_dict()
    cfg = qwen.from_hf_config(hf)
    assert cfg.head_dim == 24 and cfg.qk_norm and cfg.attention_bias and cfg.rope_theta == 1e6
    assert qwen.from_hf_config(qwen.to_hf_config(cfg)) == cfg
    legacy = {**hf, "rope_parameters": None, "rope_theta": 5e5, "rope_scaling": None}
    assert qwen.from_hf_config(legacy).rope_theta == 5e5
    with pytest.raises(ValueError, match="model_type 'llama'"):
        qwen.from_hf_config({**hf, "model_type": "llama"})
    with pytest.raises(ValueError, match="rope scaling 'yarn'"):
        qwen.from_hf_config({**hf, "rope_parameters": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(ValueError, match="missing field 'hidden_size'"):
        qwen.from_hf_config({k: v for k, v in hf.items() if k != "hidden_size"})


def test_bad_checkpoints_name_the_problem(tiny, tmp_path):
    _, cfg, params, _ = tiny
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        qwen.load(tmp_path / "nowhere")
    qwen.save(tmp_path, cfg, params)
    bigger = {**json.loads((tmp_path / "config.json").read_text()), "intermediate_size": 128}
    (tmp_path / "config.json").write_text(json.dumps(bigger))
    with pytest.raises(ValueError, match=r"mlp.gate_proj.weight' has shape \(96, 64\)"):
        qwen.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(qwen.to_hf_config(cfg)))
    with pytest.raises(ValueError, match="dtype: parameters of dtype int32 are not supported"):
        qwen.load(tmp_path, jnp.int32)
    tensors = load_file(tmp_path / "model.safetensors")
    name = next(n for n in tensors if n.endswith("mlp.up_proj.weight"))
    save_file({**tensors, name: tensors[name].astype(np.int8)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=f"{name}' has dtype int8"):
        qwen.load(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"no model\.safetensors"):
        qwen.load(tmp_path)


def test_corrupt_files_are_errors_naming_the_file_and_extra_tensors_a_warning(tiny, tmp_path):
    _, cfg, params, _ = tiny
    qwen.save(tmp_path, cfg, params)
    weights = tmp_path / "model.safetensors"
    whole = weights.read_bytes()
    tensors = load_file(weights)
    save_file({**tensors, "model.extra.weight": np.zeros(3, np.float32)}, weights)
    with pytest.warns(UserWarning, match=r"1 tensors .* ignored: \['model.extra.weight'\]"):
        qwen.load(tmp_path)
    weights.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=r"model\.safetensors: .*truncated or corrupt"):
        qwen.load(tmp_path)
    weights.write_bytes(whole)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json: not valid JSON"):
        qwen.load(tmp_path)
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"config\.json: expected a JSON object"):
        qwen.load(tmp_path)


def test_token_ids_outside_the_vocabulary_are_errors(tiny):
    _, cfg, params, _ = tiny
    positions = np.arange(3, dtype=np.int32)[None]
    for bad in (cfg.vocab_size, -1):
        tokens = np.array([[1, bad, 2]], np.int32)
        with pytest.raises(ValueError, match=rf"tokens: token ids span \[{min(bad, 1)}, "):
            qwen.forward(params, cfg, tokens, positions)
        with pytest.raises(ValueError, match="prompt: token ids span"):
            generate(params, cfg, tokens, positions, qwen.init_cache(cfg, 1, 8),
                     jax.random.key(0), max_tokens=4, max_new_tokens=jnp.int32(4),
                     stop_tokens=jnp.array([-1], jnp.int32))
    ok = np.array([[0, cfg.vocab_size - 1, 2]], np.int32)
    assert qwen.forward(params, cfg, ok, positions)[0].shape == (1, 3, cfg.vocab_size)
    qwen.check_token_ids(jnp.asarray(ok), cfg.vocab_size)  # device arrays are checked too
    with pytest.raises(ValueError, match="tokens: token ids span"):
        qwen.check_token_ids(jnp.asarray(ok) + 1, cfg.vocab_size)
    wide = np.array([[1, 2**32 + 1]], np.int64)  # not narrowed to int32 before the check
    with pytest.raises(ValueError, match=r"ids: token ids span \[1, 4294967297\]"):
        qwen.check_token_ids(wide, cfg.vocab_size, "ids")
    qwen.check_token_ids(np.zeros((2, 0), np.int32), cfg.vocab_size)


def test_attention_equals_numpy():
    """Attention against a dense numpy softmax over the causally visible, valid keys, with left
    padding and GQA: cache-free (query blocks skip later key blocks; L not a multiple of the
    block) and continuing a cache (queries start at slot 7)."""
    from models.qwen.model import attention

    rng = np.random.default_rng(0)
    b, l, h, kv, e, offset = 2, 45, 4, 2, 8, 7
    for start, block in ((0, 16), (offset, 16), (0, 1024)):
        s = l + start
        q = rng.normal(size=(b, l, h, e)).astype(np.float32)
        k = rng.normal(size=(b, kv, s, e)).astype(np.float32)
        v = rng.normal(size=(b, kv, s, e)).astype(np.float32)
        valid = np.ones((b, s), bool)
        valid[1, :start + 5] = False
        q_slots = None if start == 0 else jnp.arange(start, start + l)
        got = np.asarray(attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), q_slots,
                                   jnp.asarray(valid), block))
        for row in range(b):
            for i in range(l):
                seen = valid[row, :start + i + 1]
                if not seen.any():
                    continue
                for head in range(h):
                    keys = k[row, head // 2, :start + i + 1]
                    values = v[row, head // 2, :start + i + 1]
                    scores = keys[seen] @ q[row, i, head] / np.sqrt(e)
                    weights = np.exp(scores - scores.max())
                    want = weights @ values[seen] / weights.sum()
                    np.testing.assert_allclose(got[row, i, head], want, atol=1e-5)
