"""Regenerate ``tests/data/triattention_fixture.safetensors``: TriAttention's kept tokens, from the official code run
unmodified on a fixed trace of ``tiny_llama``.

    python -m bench.triattention_fixture --reference DIR --python PY

``DIR`` holds WeianMao/triattention c3744ee6's ``triattention/`` package (``git archive HEAD triattention``); ``PY`` a
Python with torch and a transformers whose ``LlamaRotaryEmbedding`` still takes ``device=`` (the reference's
``build_rotary`` passes it; 5.2.0 does, 5.23 does not: the kvpress venv of ``make kvpress-check`` serves). The
reference runs there, in a child process, unmodified; our side runs here.

The traces: ``tiny_llama`` (random weights, seed 0) over ``TOKENS`` tokens at each of ``STARTS`` in the bundled
essays, its post-RoPE keys per layer; the calibration: our :func:`snapstream_core.calibration.query_statistics` over
another part of the essays, handed to the reference in its own ``.pt`` layout
(``pruning_utils.save_head_frequency_stats``'s keys). The reference's ``TriAttention.compute_keep_indices``
(``per_head_pruning``, normalised scores, prompt protected) is called at each slack trigger as
``apply_triattention_patch``'s forward calls it, and its cache bookkeeping (per-head positions, gathers) is replayed
here; its keys at later steps are the trace's. Written: the traces (one per row), the calibration, the model's RoPE
inverse frequencies, and per round the kept positions per KV head in the reference's order (the prompt, then the
top-k in score order), with its tie-break noise (``pruning_seed`` 0, the protocol) and without.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "triattention_fixture.safetensors"
PROMPT, BUDGET, INTERVAL, TOKENS = 20, 64, 32, 192  # rounds at 96, 128, 160 and 192 tokens seen
STARTS = (0, 1000, 2000, 3000)  # token offsets of the traces in the essays: one row each


def trace(model, ids: torch.Tensor) -> torch.Tensor:
    """Post-RoPE keys (L, H_kv, T, D) of one forward over ``ids`` (1, T)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    return torch.stack([layer.keys[0].float() for layer in cache.layers])


def reference_rounds(ref_root: Path, keys: torch.Tensor, q_mean: torch.Tensor, q_abs: torch.Tensor,
                     config_dir: Path, seed: int | None) -> torch.Tensor:
    """Kept positions (rounds, H_kv, BUDGET) chosen by the official ``TriAttention`` over the trace."""
    sys.path.insert(0, str(ref_root))
    from triattention.methods.triattention import TriAttention, TriAttentionConfig

    L, H, F = q_abs.shape
    stats_path = config_dir / "stats.pt"
    torch.save({"metadata": {"sampled_heads": [[layer, head] for layer in range(L) for head in range(H)],
                             "head_dim": 2 * F, "rope_style": "half", "rope_type": "default"},
                "stats": {f"layer{layer:02d}_head{head:02d}": {"q_mean_real": q_mean[layer, head].real,
                                                              "q_mean_imag": q_mean[layer, head].imag,
                                                              "q_abs_mean": q_abs[layer, head]}
                          for layer in range(L) for head in range(H)}}, stats_path)
    comp = TriAttention(TriAttentionConfig(
        stats_path=stats_path, model_path=config_dir, device=torch.device("cpu"), dtype=torch.float32,
        budget=BUDGET, offset_max_length=65536, score_aggregation="mean", seed=seed, normalize_scores=True,
        count_prompt_tokens=True, allow_prefill_compression=False, divide_length=INTERVAL, use_slack_trigger=True,
        per_head_pruning=True))
    comp.reset_compression_state()
    # apply_triattention_patch's forward, its bookkeeping replayed: prefill, then one token per step
    held = [keys[layer][None, :, :PROMPT] for layer in range(L)]  # (1, H_kv, S, D) per layer
    comp.cache_positions, comp.absolute_position, comp.prefix_length = list(range(PROMPT)), PROMPT, PROMPT
    rounds = []
    for p in range(PROMPT, keys.shape[2]):
        held = [torch.cat([k, keys[layer][None, :, p:p + 1]], dim=2) for layer, k in enumerate(held)]
        comp.cache_positions.append(p)
        if comp.cache_positions_per_head is not None:
            for positions in comp.cache_positions_per_head:
                positions.append(p)
        comp.absolute_position += 1
        if held[0].shape[2] < BUDGET + INTERVAL:
            continue
        keep = comp.compute_keep_indices(tuple((k, k) for k in held), prefix_length=comp.prefix_length)
        index = keep[None, :, :, None].expand(1, -1, -1, keys.shape[-1])
        held = [k.gather(2, index) for k in held]
        before = comp.cache_positions_per_head or [comp.cache_positions] * keep.shape[0]
        comp.cache_positions_per_head = [[before[h][i] for i in keep[h].tolist()] for h in range(keep.shape[0])]
        comp.cache_positions = list(comp.cache_positions_per_head[0])
        rounds.append(torch.tensor(comp.cache_positions_per_head))
    sys.path.remove(str(ref_root))
    return torch.stack(rounds)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, type=Path, help="folder holding the reference's triattention/")
    parser.add_argument("--python", default=sys.executable, help="the Python the reference runs under")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # internal: run the reference on this trace
    args = parser.parse_args(argv)
    if not (args.reference / "triattention" / "methods" / "triattention.py").is_file():
        print(f"error: --reference: {args.reference} holds no triattention/methods/triattention.py", file=sys.stderr)
        return 2
    if args.child is not None:
        data = torch.load(args.child / "trace.pt")
        q_mean = torch.complex(data["q_mean_real"], data["q_mean_imag"])
        for name, seed in (("kept_seed0", 0), ("kept_no_noise", None)):
            data[name] = torch.stack([reference_rounds(args.reference, keys, q_mean, data["q_abs_mean"], args.child,
                                                       seed) for keys in data["keys"]])
        torch.save(data, args.child / "trace.pt")
        return 0
    import subprocess

    from safetensors.torch import save_file

    from evals.calibrate import model_config
    from evals.config.models import load_model
    from snapstream_core.calibration import query_statistics
    from snapstream_core.rope import rope_inv_freq
    from tasks.needle import haystack_text

    model, tokenizer = load_model(model_config("tiny_llama"))
    ids = tokenizer(haystack_text(), return_tensors="pt").input_ids
    keys = torch.stack([trace(model, ids[:, start:start + TOKENS]) for start in STARTS])  # (N, L, H_kv, T, D)
    q_mean, q_abs = query_statistics(model, ids[:, 4096:4608])
    data = {"keys": keys, "q_mean_real": q_mean.real.contiguous(), "q_mean_imag": q_mean.imag.contiguous(),
            "q_abs_mean": q_abs, "inv_freq": rope_inv_freq(model).float()}
    with tempfile.TemporaryDirectory() as tmp:
        model.config.save_pretrained(tmp)
        torch.save(data, Path(tmp) / "trace.pt")
        subprocess.run([args.python, str(Path(__file__).resolve()), "--reference", str(args.reference),
                        "--child", tmp], check=True)
        data = torch.load(Path(tmp) / "trace.pt")
    meta = {"prompt": str(PROMPT), "budget": str(BUDGET), "interval": str(INTERVAL), "tokens": str(TOKENS),
            "reference": "WeianMao/triattention c3744ee6 triattention/methods/triattention.py"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in data.items()}, str(args.out), meta)
    seeded, plain = data["kept_seed0"], data["kept_no_noise"]
    print(f"wrote {args.out}: {seeded.shape[0]} traces x {seeded.shape[1]} rounds x {seeded.shape[2]} KV heads; "
          f"seed-0 noise changes {int((seeded != plain).any(-1).sum())} of them")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
