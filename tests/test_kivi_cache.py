"""``compression=kivi`` in the eager cache (``snapstream_core.kivi_layer.KiviLayer``) under plain ``model.generate``:
the logits of every step equal those of an independent reference of the official schedule
(``tests/kivi_reference.py``), the bytes held are ``KVFormat``'s, and what KIVI cannot store is refused in one line."""

from __future__ import annotations

import pytest
import torch

import snapstream_core as ss
from snapstream_core.api import compression_from_config
from snapstream_core.methods import Kivi
from snapstream_core.policies.kv_format import KVFormat
from tests.kivi_reference import OfficialScheduleCache

NEW = 40


def _ids(n: int, seed: int = 0, batch: int = 1) -> torch.Tensor:
    return torch.randint(1, 1000, (batch, n), generator=torch.Generator().manual_seed(seed))


def kivi_generate(model, ids, method, new=NEW):
    model.set_attn_implementation("sdpa")
    ss.attach(model)
    cache = ss.make_cache(model, method)
    out = model.generate(ids, max_new_tokens=new, do_sample=False, past_key_values=cache, pad_token_id=0,
                         output_scores=True, return_dict_in_generate=True)
    return out, cache


def reference_generate(model, ids, method, new=NEW):
    model.set_attn_implementation("sdpa")
    cache = OfficialScheduleCache(method.bits, method.group_size, method.residual, config=model.config)
    return model.generate(ids, max_new_tokens=new, do_sample=False, past_key_values=cache, pad_token_id=0,
                          output_scores=True, return_dict_in_generate=True)


# prompts shorter than the residual (nothing quantized at the prefill), a multiple of it (every key quantized) and
# neither; 40 new tokens move the key ring through two quantizations and push values out of the window every step
@pytest.mark.parametrize("prompt_len, bits", [(10, 2), (32, 4), (37, 2), (37, 4)])
def test_generate_equals_the_official_schedule_on_tiny_llama(tiny_model, prompt_len, bits):
    method = Kivi(bits=bits, group_size=8, residual=16)  # tiny_llama: head dim 16
    ids = _ids(prompt_len, seed=prompt_len)
    out, cache = kivi_generate(tiny_model, ids, method)
    ref = reference_generate(tiny_model, ids, method)
    assert torch.equal(out.sequences, ref.sequences)
    assert all(torch.equal(a, b) for a, b in zip(out.scores, ref.scores, strict=True))  # every step, bit for bit
    full = tiny_model.generate(ids, max_new_tokens=NEW, do_sample=False, pad_token_id=0, output_scores=True,
                               return_dict_in_generate=True)
    assert not all(torch.equal(a, b) for a, b in zip(out.scores, full.scores))  # quantization shows


def test_generate_equals_the_official_schedule_on_smollm2(smollm2):
    model, tok = smollm2
    method = Kivi(bits=2, group_size=32, residual=32)  # head dim 64
    ids = tok("The lighthouse keeper climbed the stairs every evening to light the lamp. " * 4,
              return_tensors="pt")["input_ids"][:, :50]
    out, _ = kivi_generate(model, ids, method, new=30)
    ref = reference_generate(model, ids, method, new=30)
    assert torch.equal(out.sequences, ref.sequences)
    assert all(torch.equal(a, b) for a, b in zip(out.scores, ref.scores, strict=True))


def test_a_batch_of_equal_prompts_decodes_each_row_as_alone(tiny_model):
    method = Kivi(bits=2, group_size=8, residual=16)
    ids = torch.cat([_ids(21, seed=1), _ids(21, seed=2)])
    both, _ = kivi_generate(tiny_model, ids, method, new=20)
    for row in range(2):
        alone, _ = kivi_generate(tiny_model, ids[row : row + 1], method, new=20)
        assert torch.equal(both.sequences[row], alone.sequences[0])


@pytest.mark.parametrize("bits", [2, 4])
def test_bytes_held_are_the_formula_of_the_format(tiny_model, bits):
    """kv_bytes_* are the storage's real bytes, equal to ``KVFormat.row_bytes`` of the slots held; at 2 bits on
    tiny_llama (fp32) the codes are 1/16 of the full cache's bytes, the scales, minima and rings on top."""
    method = Kivi(bits=bits, group_size=8, residual=16)
    T = 37
    out, cache = kivi_generate(tiny_model, _ids(T, seed=3), method)
    cfg = tiny_model.config
    L, H, D, b = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads, 4
    fmt = method.kv_format
    assert fmt == KVFormat("kivi", bits=bits, group_size=8, residual=16)
    final = T + NEW - 1  # the last token is never fed back
    row = cache.stats.as_row()
    assert row["kv_bytes_after_prefill"] == fmt.row_bytes(T, L, H, D, b)
    assert row["kv_bytes_final"] == row["kv_bytes_peak"] == fmt.row_bytes(final, L, H, D, b)
    assert sum(layer.nbytes() for layer in cache.layers) == fmt.row_bytes(final, L, H, D, b)
    G, R = 8, 16
    codes = 2 * final * H * D * bits // 8
    scales = (-(-final // G) * H * D + final * H * (D // G)) * 2 * b
    rings = (2 * R + 1) * H * D * b
    assert fmt.row_bytes(final, L, H, D, b) == L * (codes + scales + rings)
    full = KVFormat().row_bytes(final, L, H, D, b)
    assert L * codes * (32 // bits) == full  # 2 bits: 1/16 of fp32, 4 bits: 1/8
    assert row["kv_tokens_peak"] == final
    held = cache.layers[0]._slot_bytes()
    assert held == 2 * D * bits // 8 + 4 * (D // G) * b  # a slot's codes, scales and minima


def test_a_left_padded_batch_is_refused(tiny_model):
    method = Kivi(bits=2, group_size=8, residual=16)
    ids = _ids(20, seed=4, batch=2)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    tiny_model.set_attn_implementation("sdpa")
    ss.attach(tiny_model)
    with pytest.raises(ValueError, match=r"^compression.method: kivi groups each row's tokens from its first slot"):
        tiny_model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0,
                            past_key_values=ss.make_cache(tiny_model, method))


def test_a_multi_token_update_after_the_prefill_is_refused(tiny_model):
    method = Kivi(bits=2, group_size=8, residual=16)
    tiny_model.set_attn_implementation("sdpa")
    ss.attach(tiny_model)
    cache = ss.make_cache(tiny_model, method)
    ids = _ids(12, seed=5)
    with torch.no_grad():
        tiny_model(ids, past_key_values=cache, use_cache=True)
        with pytest.raises(ValueError, match=r"^compression.method: kivi decodes one token per step"):
            tiny_model(_ids(2, seed=6), past_key_values=cache, use_cache=True)


def test_a_group_that_does_not_divide_the_head_dim_is_refused_at_the_prefill(tiny_model):
    tiny_model.set_attn_implementation("sdpa")
    ss.attach(tiny_model)
    cache = ss.make_cache(tiny_model, Kivi(group_size=32, residual=128))  # the defaults: head dim 16
    with pytest.raises(ValueError, match=r"^compression.group_size: must divide the model's head_dim \(16\), got 32"):
        tiny_model.generate(_ids(8), max_new_tokens=2, do_sample=False, pad_token_id=0, past_key_values=cache)


@pytest.mark.parametrize("cfg, message", [
    ({"bits": 3}, "compression.bits: must be 2 or 4, got 3"),
    ({"bits": 8}, "compression.bits: must be 2 or 4, got 8"),
    ({"group_size": 0}, "compression.group_size: must be an integer >= 1, got 0"),
    ({"residual": 0}, "compression.residual: must be an integer >= 1, got 0"),
    ({"group_size": 8, "residual": 12}, "compression.residual: must be a multiple of compression.group_size (8)"),
    ({"kv_dtype": "fp8_e4m3"}, "compression.kv_dtype: kivi stores its own 2-bit codes; fp8_e4m3 cannot be stacked"),
    ({"positions": "in_cache"}, "compression.positions: kivi keeps every token in place"),
    ({"prompt_budget": 64}, "compression.prompt_budget: kivi does not read it; it has no budget"),
    ({"budget": 64}, "compression.budget: kivi does not read it; it has no budget"),
    ({"ratio": 0.5}, "compression.ratio: kivi does not read it; it has no budget"),
    ({"window": 8}, "compression.window: kivi does not read it (a knob of"),
])
def test_bad_knobs_are_refused_in_one_line(cfg, message):
    with pytest.raises(ValueError) as err:
        compression_from_config({"method": "kivi", **cfg})
    text = str(err.value)
    assert "\n" not in text and text.startswith(message), text


def test_check_shape_refuses_a_head_dim_the_group_does_not_divide():
    Kivi(group_size=32).check_shape({"head_dim": 64})
    Kivi(group_size=16).check_shape({"head_dim": 16})
    with pytest.raises(ValueError, match=r"^compression.group_size: must divide the model's head_dim \(64\), got 48"):
        Kivi(group_size=48, residual=96).check_shape({"head_dim": 64})


def test_the_method_keeps_every_token_but_is_not_the_full_cache():
    method = Kivi()
    assert method.footprint(100, 20) == 120 and method.slots(100, 20) == 119
    assert not method.keeps_all(100, 20)
    assert method.knobs() == {"method": "kivi", "positions": "original", "bits": 2, "group_size": 32,
                              "residual": 128}
    assert method.kv_format.label == "kivi2/g32/r128"


@pytest.mark.parametrize("overrides, message", [
    (["model=smollm2_135m", "compression.group_size=48", "compression.residual=96"],
     "compression.group_size: must divide the model's head_dim (64), got 48"),
    (["model=tiny_llama"], "compression.group_size: must divide the model's head_dim (16), got 32"),
    (["model=smollm2_135m", "compression.bits=3"], "compression.bits: must be 2 or 4, got 3"),
    (["model=smollm2_135m", "compression.kv_dtype=fp8_e4m3"], "compression.kv_dtype: kivi stores its own"),
    (["model=smollm2_135m", "compression.prompt_budget=128"],
     "compression.prompt_budget: kivi does not read it; it has no budget"),
])
def test_the_config_check_refuses_before_any_model_loads(overrides, message):
    """``evals.config.spec.check`` (what ``evals.run`` and every job of a sweep run first): one line naming the field,
    the head dim read from the model's config, no weights loaded."""
    from evals.config.spec import check
    from tests.refusals import one_line_error
    from tests.runner_utils import compose_cfg

    with pytest.raises(ValueError) as err:
        check(compose_cfg(["task=needle", "compression=kivi", *overrides]), offline=True)
    text = one_line_error(err)
    assert message in text, text


def test_the_config_check_accepts_kivi_on_smollm2():
    from evals.config.spec import check
    from tests.runner_utils import compose_cfg

    spec = check(compose_cfg(["model=smollm2_135m", "task=needle", "compression=kivi", "compression.bits=4"]),
                 offline=True)
    assert spec.method == Kivi(bits=4)


def test_a_quantized_run_is_never_called_the_full_cache():
    """The rows' ``compressed`` and the headline's "keeps every token (= full cache)" follow the stored format too:
    kivi (and fp8 on a method that drops nothing) keeps every token, but not the full cache's outputs."""
    from evals.record.geometry import keeps_every_token, row_geometry

    assert row_geometry(Kivi(), 100, 20)["compressed"] is True
    assert keeps_every_token({"method": "kivi", "bits": 4}, [(100, 20)]) is False
    roomy = {"method": "snapkv", "prompt_budget": 4096}
    assert keeps_every_token(roomy, [(100, 20)]) is True
    assert keeps_every_token({**roomy, "kv_dtype": "fp8_e4m3"}, [(100, 20)]) is False
    assert keeps_every_token({"method": "none"}, [(100, 20)]) is None


def test_n_samples_from_one_prefill_copy_the_whole_kivi_state(tiny_model):
    """``generate(n=3)`` repeats the prefilled cache (codes, scales, minima and rings) for each sample."""
    from snapstream_core.generate import SamplingConfig, generate

    method = Kivi(bits=2, group_size=8, residual=16)
    p = _ids(40, seed=3)[0].tolist()
    one = generate(tiny_model, [p], method, SamplingConfig(max_new_tokens=30), eos_token_ids=[], pad_token_id=0)
    three = generate(tiny_model, [p], method, SamplingConfig(max_new_tokens=30, n=3), eos_token_ids=[],
                     pad_token_id=0)
    assert three.tokens[0] == [one.tokens[0][0]] * 3
    assert three.stats["kv_bytes_peak"] == one.stats["kv_bytes_peak"]  # per sequence
