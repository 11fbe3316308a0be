"""A quantized KV storage is refused in one line naming the field where it cannot run, before any weights load:
on ``backend=vllm`` (its FP8 cache is not this storage), with a torch that has no float8 dtype; bad values of the
shared knobs are refused by the config check."""

from __future__ import annotations

import sys

import pytest

from evals.config.kv_storage import check_backend, check_device
from evals.config.spec import check
from snapstream_core import compression_from_config
from tests.refusals import one_line_error
from tests.runner_utils import compose_cfg

VLLM = ["backend=vllm", f"backend.python={sys.executable}", "model=smollm2_135m", "task=needle"]


def test_fp8_on_the_vllm_backend_is_refused_in_one_line_and_bf16_is_not():
    check(compose_cfg([*VLLM, "compression=none"]), offline=True)  # the full cache in the model's dtype runs there
    for scale in ("one", "tensor", "head"):
        cfg = compose_cfg([*VLLM, "compression=none", "compression.kv_dtype=fp8_e4m3", f"compression.kv_scale={scale}"])
        with pytest.raises(ValueError) as err:
            check(cfg, offline=True)
        assert one_line_error(err).startswith("compression.kv_dtype: backend=vllm keeps the KV cache in the model's")


def test_fp8_is_refused_without_a_float8_dtype_and_allowed_with_one():
    fp8 = compression_from_config({"method": "rkv", "kv_dtype": "fp8_e4m3"})
    with pytest.raises(ValueError) as err:
        check_device(fp8, has_fp8=lambda: False)
    assert one_line_error(err).startswith("compression.kv_dtype: fp8_e4m3 needs torch's float8_e4m3fn dtype")
    check_device(fp8, has_fp8=lambda: True)
    check_device(compression_from_config({"method": "rkv"}), has_fp8=lambda: False)  # bf16 needs nothing
    check_backend(fp8, "hf", engine=True, loads_weights=True)  # our engine stores it


@pytest.mark.parametrize(("overrides", "start"), [
    (["compression.kv_dtype=fp16"], "compression.kv_dtype: must be one of auto, fp8_e4m3"),
    (["compression.kv_scale=head"], "compression.kv_scale: only read with compression.kv_dtype=fp8_e4m3"),
    (["compression.kv_dtype=fp8_e4m3", "compression.kv_scale=channel"], "compression.kv_scale: must be one of"),
])
def test_bad_storage_knobs_are_one_line_naming_the_field(overrides, start):
    cfg = compose_cfg(["model=tiny_llama", "task=needle", "compression=snapkv", *overrides])
    with pytest.raises(ValueError) as err:
        check(cfg, offline=True)
    assert one_line_error(err).startswith(start)
