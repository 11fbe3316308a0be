"""Write ``tests/data/kvpress_kept.json``: the positions kvpress 0.5.5's presses keep on a short prompt of the
embedded SmolLM2, for ``tests/test_kvpress_twins.py`` (which checks ours keep the same ones, without kvpress).

Run in kvpress's environment (``.venv-kvpress``, ``make kvpress-check`` builds it), from the repository root::

    .venv-kvpress/bin/python bench/kvpress_check/fixture.py MODEL_DIR tests/data/kvpress_kept.json

``MODEL_DIR``: the converted SmolLM2 folder (``evals.config.models.embedded_dir()``).
The presses run unmodified, at their defaults but the compression ratio (SnapKV: window 64, kernel 5; AdaKV on that
SnapKV; PyramidKV: window 64, kernel 5, ``beta`` :data:`PYRAMID_BETA`, at which 128 of 320 tokens make a pyramid
rather than kvpress's fallback to SnapKV's budget). Each (layer, KV head) is stored as a hex bit mask over the prompt's
positions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from common import load_model
from kvpress.utils import compute_n_kept
from theirs import SCORED, _press, kept_positions, ratio_for
from transformers import DynamicCache

T, N_KEEP, SEED = 320, 128, 0
PYRAMID_BETA = 2


def mask_hex(positions: list[int]) -> str:
    """The positions as the hex digits of ``sum(2**p)``."""
    return format(sum(1 << p for p in positions), "x")


@torch.no_grad()
def main(model_dir: str, out: Path) -> None:
    model = load_model(model_dir)
    ids = torch.randint(1, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(SEED))
    ratio = ratio_for(T, N_KEEP)
    job = {"window": 64, "kernel": 5, "pyramid_beta": PYRAMID_BETA}
    kept = {}
    for name in SCORED:
        press = _press(name, job, ratio, record=True)
        with press(model):
            model(input_ids=ids, past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1)
        n = compute_n_kept(T, ratio)
        kept[name] = [[mask_hex(row) for row in layer] for layer in kept_positions(name, press, n)]
    import kvpress
    import transformers

    meta = {"kvpress": kvpress.__version__ if hasattr(kvpress, "__version__") else "0.5.5",
            "transformers": transformers.__version__, "torch": torch.__version__, "n_keep": N_KEEP, "window": 64,
            "kernel": 5, "pyramid_beta": PYRAMID_BETA, "compression_ratio": ratio}  # fmt: skip
    out.write_text(json.dumps({"meta": meta, "ids": ids[0].tolist(), "kept": kept}, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
