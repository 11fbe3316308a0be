"""Peak tensor memory of one item, prefill (``prefill_prompt``) + n-sample decode, at two prompt lengths.

    python -m bench.prefill_memory                      # SmolLM2, T = 256 and 7836, n = 2, the four methods
    python -m bench.prefill_memory --lengths 256,4096 --n 4 --steps 8 --out bench/results/prefill_memory

For each method and prompt length: the peak of the tensor bytes live at once (``bench.live_bytes.LiveBytes``:
deterministic, weights excluded) while ``prefill_prompt`` prefills the prompt in chunks, the cache is expanded to
``n`` rows and ``model.generate`` decodes ``--steps`` tokens from it (as ``generate``'s n > 1 path continues), next
to ``prefill_peak_bytes``'s estimate of the prefill alone and the size of the whole prompt's logits (``T x V`` fp32,
``old_prompt_logits_mib``), which a prefill that keeps only the last logits never holds. The target: with n = 2 on
SmolLM2, the 7.8k prompt peaks at most 400 MiB above the 256 one.
"""

from __future__ import annotations

import argparse
import csv
import logging
import os

import torch

from bench.live_bytes import LiveBytes

log = logging.getLogger(__name__)
MiB = 2**20


def methods():
    import snapstream_core as ss

    return {
        "none": ss.NoCompression(),
        "snapkv": ss.SnapKV(),
        "streaming_llm": ss.StreamingLLM(),
        "snapstream": ss.SnapStream(),
    }


@torch.no_grad()
def item_peak(model, ids: torch.Tensor, method, n: int, steps: int, chunk_size: int | None) -> tuple[int, int]:
    """(peak bytes of prefill + decode, peak bytes of the prefill alone) for one item of ``n`` samples."""
    from snapstream_core.prefill import prefill_prompt

    T = ids.shape[1]
    with LiveBytes() as mem:
        cache, logits = prefill_prompt(model, ids, method, chunk_size=chunk_size)
        prefill_peak = mem.peak
        first = logits.argmax(-1, keepdim=True).repeat_interleave(n, dim=0)  # (n, 1)
        cache.batch_repeat_interleave(n)
        del logits
        model.generate(input_ids=first, attention_mask=torch.ones(n, T + 1, dtype=torch.long), past_key_values=cache,
                       max_new_tokens=steps, do_sample=False, pad_token_id=0)
        del cache
    return mem.peak, prefill_peak


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2_135m", help="conf/model/<name>.yaml")
    parser.add_argument("--lengths", default="256,7836", help="prompt lengths, comma-separated")
    parser.add_argument("--n", type=int, default=2, help="samples per item")
    parser.add_argument("--steps", type=int, default=16, help="decode steps")
    parser.add_argument("--chunk", type=int, default=None, help="prefill chunk (default: prefill.DEFAULT_CHUNK)")
    parser.add_argument("--methods", default="none,snapkv,streaming_llm,snapstream")
    parser.add_argument("--out", default="bench/results/prefill_memory", help="folder for memory.csv and memory.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from omegaconf import OmegaConf

    from evals.config.models import load_model
    from snapstream_core.prefill import DEFAULT_CHUNK, prefill_peak_bytes

    model, _ = load_model(OmegaConf.load(os.path.join("conf", "model", f"{args.model}.yaml")))
    config = model.config
    dtype_bytes = next(model.parameters()).element_size()
    lengths = [int(x) for x in args.lengths.split(",")]
    gen = torch.Generator().manual_seed(0)
    rows = []
    for name in args.methods.split(","):
        method = methods()[name]
        for T in lengths:
            ids = torch.randint(0, config.vocab_size, (1, T), generator=gen)
            peak, prefill_peak = item_peak(model, ids, method, args.n, args.steps, args.chunk)
            slots = method.prefill_slots(T)
            estimate = prefill_peak_bytes(config, T, slots, chunk_size=args.chunk, window=method.query_rows(T),
                                          dtype_bytes=dtype_bytes, score_buffers=method.score_buffers(T),
                                          moments=method.query_moments(T) is not None)
            rows.append(dict(method=name, prompt_len=T, n=args.n, steps=args.steps,
                             chunk=args.chunk or DEFAULT_CHUNK, peak_mib=round(peak / MiB, 1),
                             prefill_peak_mib=round(prefill_peak / MiB, 1),
                             prefill_estimate_mib=round(estimate / MiB, 1),
                             old_prompt_logits_mib=round(T * config.vocab_size * 4 / MiB, 1)))
            log.info("%s", rows[-1])
    short, long = min(lengths), max(lengths)
    for row in rows:
        base = next(r for r in rows if r["method"] == row["method"] and r["prompt_len"] == short)
        row["delta_vs_shortest_mib"] = round(row["peak_mib"] - base["peak_mib"], 1)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "memory.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    cols = list(rows[0])
    lines = [f"# Item peak memory: prefill_prompt + decode ({args.model}, n={args.n}, {args.steps} steps)", "",
             "Tracked tensor bytes (bench.live_bytes), weights excluded. "
             f"Acceptance: {long} tokens at most 400 MiB above {short}.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    with open(os.path.join(args.out, "memory.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return rows


if __name__ == "__main__":
    main()
