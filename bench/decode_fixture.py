"""Write ``tests/data/decode_compaction.pt``: kept indices of the official R-KV and decode-time SnapKV functions,
run unmodified on a trace of the embedded model, for ``tests/test_decode_fidelity.py``.

Usage (the official repositories checked out outside ours; ``fetch`` gives git dirs: ``git --git-dir=G archive
HEAD | tar -x -C DIR``)::

    python -m bench.decode_fixture --rkv DIR_RKV --triattention DIR_TRI [--out tests/data/decode_compaction.pt]

The trace: the post-RoPE keys and queries of two layers of SmolLM2-135M-Instruct (3 KV heads, 9 heads) over a
fixed text, stored in float16 (both sides compute from the same float32 copy). The decode is replayed with teacher
forcing: the cache starts as the prompt's ``PROMPT`` tokens (shorter than the budget), each next token's key is
appended and its query pushed to the ring of the last ``window`` queries, and at every position ``p % INTERVAL ==
0`` (R-KV's ``length % divide_length``) ``update_kv(cache, ring, values)`` runs. The values carry each entry's
position, so the values the reference gathers are the kept positions, in the reference's own order.

``rkv_protect``: the same replay at ``PROTECT_BUDGET`` through TriAttention's R-KV baseline with
``protect_prefill=True`` and ``attach_prefill_length(PROMPT)`` (``triattention/methods/baselines/r1_kv.py``
``R1KV._update_kv_protect_prefill``: the prompt kept, only the decode segment scored), for ``compression.rkv
protect_prompt=true``.

Loaded by path: ``rkv/compression/r1_kv.py`` with ``rkv/utils.py`` as its package (R-KV's package ``__init__``
imports modules that are not in the repository), ``triattention/methods/baselines/snapkv.py`` with its ``utils.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import types
from pathlib import Path

import torch

log = logging.getLogger(__name__)

PROMPT, TOKENS, BUDGET, INTERVAL, WINDOW, KERNEL = 40, 200, 48, 16, 8, 7
PROTECT_BUDGET = 80  # the prompt's 40 kept, 32 decoded tokens scored for the other 40 - WINDOW
LAYERS = (3, 20)
TEXT = (
    "Let n be the number of ordered pairs of positive integers (a, b) with a + b = 1000 and neither a nor b has a "
    "zero digit. We count the pairs digit by digit: the units digits must sum to 10, the tens digits, with the carry, "
    "to 9, and so on. Each case is checked carefully, and the totals are added. Wait, let me recheck the carry in the "
    "hundreds place, since a carry changes which digits are allowed. The units digit pairs are (1, 9), (2, 8), (3, 7), "
    "(4, 6), (5, 5), (6, 4), (7, 3), (8, 2), (9, 1): nine choices. The tens digits must sum to 9 with no zero: eight "
    "choices. So far the count is nine times eight, and the hundreds digits follow the same rule, eight choices."
)


def _load(name: str, path: Path, package: str | None = None):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if package:
        module.__package__ = package
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def reference_classes(rkv_dir: Path, tri_dir: Path):
    """``R1KV`` (R-KV), ``SnapKV`` and ``R1KV`` (TriAttention's baselines), their sources unmodified."""
    pkg = types.ModuleType("rkv_ref")
    pkg.__path__ = [str(rkv_dir / "rkv" / "compression")]
    sys.modules["rkv_ref"] = pkg
    utils = _load("rkv_ref_utils", rkv_dir / "rkv" / "utils.py")
    pkg.cal_similarity, pkg.compute_attention_scores = utils.cal_similarity, utils.compute_attention_scores
    r1kv = _load("rkv_ref.r1_kv", rkv_dir / "rkv" / "compression" / "r1_kv.py", package="rkv_ref")
    base = tri_dir / "triattention" / "methods" / "baselines"
    tpkg = types.ModuleType("tri_ref")
    tpkg.__path__ = [str(base)]
    sys.modules["tri_ref"] = tpkg
    _load("tri_ref.utils", base / "utils.py", package="tri_ref")
    snap = _load("tri_ref.snapkv", base / "snapkv.py", package="tri_ref")
    tri_r1kv = _load("tri_ref.r1_kv", base / "r1_kv.py", package="tri_ref")
    return r1kv.R1KV, snap.SnapKV, tri_r1kv.R1KV


def capture(n_tokens: int) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """{layer: (keys (H_kv, N, D), queries (H, N, D))} post-RoPE, float32, from one forward of the embedded model."""
    from omegaconf import OmegaConf
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from evals.config.models import load_model

    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "model" / "smollm2_135m.yaml")
    model, tok = load_model(cfg)
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def record(module, query, key, value, attention_mask, **kwargs):
        seen[module.layer_idx] = (key[0].detach().clone(), query[0].detach().clone())
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("fixture_capture", record)
    AttentionMaskInterface.register("fixture_capture", sdpa_mask)
    model.set_attn_implementation("fixture_capture")
    ids = tok(TEXT, return_tensors="pt").input_ids[:, :n_tokens]
    if ids.shape[1] < n_tokens:
        raise SystemExit(f"decode_fixture: the text has {ids.shape[1]} tokens, fewer than {n_tokens}")
    with torch.no_grad():
        model(input_ids=ids)
    return {i: seen[i] for i in LAYERS}


def replay(make, keys: torch.Tensor, queries: torch.Tensor, budget: int = BUDGET,
           protect: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per compaction of a teacher-forced decode: the positions the cache held before it (H_kv, held) and those it
    kept (H_kv, kept), each in the reference's order. ``protect``: ``protect_prefill`` with the prompt's length."""
    H_kv, N, D = keys.shape
    extra = {"protect_prefill": True} if protect else {}
    press = make(budget=budget, window_size=WINDOW, kernel_size=KERNEL, mix_lambda=0.1, **extra)
    if protect:
        press.attach_prefill_length(PROMPT)
    pos = torch.arange(N, dtype=torch.float32)[None, :, None].expand(H_kv, N, D)
    k, v = keys[None, :, :PROMPT], pos[None, :, :PROMPT]
    ring = queries[None, :, PROMPT - WINDOW : PROMPT]
    rounds = []
    for p in range(PROMPT, N):
        k = torch.cat([k, keys[None, :, p : p + 1]], dim=2)
        v = torch.cat([v, pos[None, :, p : p + 1]], dim=2)
        ring = torch.cat([ring, queries[None, :, p : p + 1]], dim=2)[:, :, -WINDOW:]
        if p % INTERVAL == 0 and k.shape[2] >= budget:
            before = v[0, :, :, 0].long()
            k, v = press.update_kv(k, ring, v)
            rounds.append((before, v[0, :, :, 0].long()))
    return rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rkv", type=Path, required=True, help="checkout of Zefan-Cai/R-KV (d15c976)")
    parser.add_argument("--triattention", type=Path, required=True, help="checkout of WeianMao/triattention")
    parser.add_argument("--out", type=Path, default=Path("tests/data/decode_compaction.pt"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    R1KV, SnapKV, TriR1KV = reference_classes(args.rkv, args.triattention)
    trace = capture(TOKENS)
    fixture = {"params": dict(prompt=PROMPT, tokens=TOKENS, budget=BUDGET, interval=INTERVAL, window=WINDOW,
                              kernel=KERNEL, mix_lambda=0.1, layers=LAYERS, protect_budget=PROTECT_BUDGET),
               "layers": {}}
    for layer, (keys, queries) in trace.items():
        keys16, queries16 = keys.half(), queries.half()
        keys, queries = keys16.float(), queries16.float()
        fixture["layers"][layer] = {
            "keys": keys16, "queries": queries16,
            "rkv": replay(R1KV, keys, queries), "snapkv_decode": replay(SnapKV, keys, queries),
            "rkv_protect": replay(TriR1KV, keys, queries, PROTECT_BUDGET, protect=True),
        }
        log.info("layer %d: %d rounds", layer, len(fixture["layers"][layer]["rkv"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
