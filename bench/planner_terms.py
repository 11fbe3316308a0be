"""The planner's terms measured on CPU: sampling scratch, every decode-time method's compaction scratch and compile
time, each beside the figure the memory model or the planner uses for it.

    python -m bench.planner_terms                       # all three, CSVs under bench/results/planner_terms/
    python -m bench.planner_terms --only compaction     # or sampling, compile

- **Sampling** (``sampling.csv``): the peak tensor bytes (``bench.live_bytes.LiveBytes``: every storage an ATen op
  creates, while it lives; inputs excluded) and the bytes the ops read and write (``bench.op_traffic.OpTraffic``)
  of one :func:`snapstream_core.engine.noise.pick_rows` call over (rows, vocab) float32 logits, greedy and
  temperature + top-k + top-p, beside ``memory.SAMPLING_TRACKED_BYTES_PER_ENTRY`` and
  ``memory.SAMPLING_TRAFFIC_BYTES_PER_ENTRY`` (what the step time reads).
- **Compaction** (``compaction.csv``): the peak of one :func:`snapstream_core.engine.compact.compact_rows` call of
  every registered decode-time method (``methods.METHODS``, the ``DecodeMethod`` subclasses, default knobs but the
  budget) at a few (rows, heads, KV heads, slots, layers, head dim, dtype), beside
  ``memory.compaction_bytes(arch, slots, Q, method.compaction_scratch(arch, slots))`` per row.
- **Compile** (``compile.csv``): wall seconds of the first engine run of a few new tokens with ``gen.compile=true``
  (torch inductor on CPU: the decode step's graph, and a decode-time method's compaction graph) less the same run
  compiled again in the same process (graphs cached), for random-weight Llama models of a few layer counts, beside
  ``evals.plan.compile_time``'s CPU figure.

Every tracked figure is deterministic (tensor storages, not RSS); the compile seconds are wall clock on this machine.
"""

from __future__ import annotations

import argparse
import csv
import logging
import tempfile
import time
from pathlib import Path

import torch

from bench.live_bytes import LiveBytes
from snapstream_core.memory import Arch, compaction_bytes

log = logging.getLogger(__name__)
OUT = Path("bench/results/planner_terms")
DTYPES = {4: torch.float32, 2: torch.bfloat16}


# -------------------------------------------------------------------------------------------------------- sampling
SAMPLING_SETTINGS = {  # (temperature, top_k, top_p)
    "greedy": (0.0, 0, 1.0),
    "temperature": (0.6, 0, 1.0),
    "top_p": (0.6, 0, 0.95),
    "top_k_top_p": (0.6, 20, 0.95),
}
SAMPLING_SHAPES = [(4, 32_000), (16, 49_152)]  # (rows, vocab)


def tracked_sampling(rows: int, vocab: int, temperature: float, top_k: int, top_p: float) -> tuple[int, int]:
    """(peak bytes allocated, bytes read and written) of one ``pick_rows`` call over (rows, vocab) float32 logits,
    every row with the same settings. Run it in a fresh process for the peak (tests/test_sampling_terms.py): in a
    long-lived process earlier work once moved when intermediate storages are released (38 B per entry, not 30)."""
    from bench.op_traffic import OpTraffic
    from snapstream_core.engine.noise import RowSampling, pick_rows
    from snapstream_core.sampling import SamplingConfig

    cfg = SamplingConfig(max_new_tokens=8, temperature=temperature, top_k=top_k, top_p=top_p)
    settings = RowSampling.of([cfg] * rows)
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0))
    keys, steps = torch.arange(rows), torch.zeros(rows, dtype=torch.long)
    with LiveBytes() as mem:
        pick_rows(logits, settings, keys, steps)
    with OpTraffic() as traffic:
        pick_rows(logits, settings, keys, steps)
    return mem.peak, traffic.bytes


def sampling_rows(shapes=SAMPLING_SHAPES) -> list[dict]:
    from snapstream_core.memory import (
        SORT_SCRATCH_BYTES_PER_ENTRY,
        sampling_peak_per_entry,
        sampling_traffic_per_entry,
    )

    out = []
    for name, knobs in SAMPLING_SETTINGS.items():
        for R, V in shapes:
            peak, traffic = tracked_sampling(R, V, *knobs)
            sort = SORT_SCRATCH_BYTES_PER_ENTRY if knobs[0] > 0 and knobs[2] < 1.0 else 0  # not trackable
            out.append({"settings": name, "rows": R, "vocab": V, "tracked_peak_bytes": peak,
                        "tracked_peak_per_entry": round(peak / (R * V), 2),
                        "modelled_peak_per_entry": sampling_peak_per_entry(*knobs) - sort,
                        "sort_scratch_per_entry": sort,
                        "tracked_traffic_bytes": traffic, "tracked_traffic_per_entry": round(traffic / (R * V), 1),
                        "modelled_traffic_per_entry": sampling_traffic_per_entry(*knobs)})
            log.info("%s", out[-1])
    return out


# ------------------------------------------------------------------------------------------------------ compaction
def decode_methods() -> dict[str, type]:
    """Every registered decode-time method class (``METHODS``'s ``DecodeMethod`` subclasses), by name."""
    from snapstream_core.methods import METHODS, DecodeMethod

    return {name: cls for name, cls in METHODS.items() if issubclass(cls, DecodeMethod)}


def run_file(name: str, arch: Arch, folder: Path) -> str:
    """A file a method needs to run (its ``run_files``) made for ``arch``: TriAttention's ``calibration`` (random
    query statistics of the right shape). Another name is refused: a new method's file needs a maker here."""
    if name != "calibration":
        raise ValueError(f"bench.planner_terms: no maker for the run file {name!r}; add one to run_file")
    from snapstream_core.calibration import save_stats

    g = torch.Generator().manual_seed(0)
    q = torch.randn(arch.n_layers, arch.n_heads, arch.head_dim // 2, 2, generator=g)
    q_mean = torch.complex(q[..., 0], q[..., 1])
    path = folder / f"calibration_{arch.n_layers}_{arch.n_heads}_{arch.n_kv_heads}_{arch.head_dim}.safetensors"
    return str(save_stats(path, q_mean, q_mean.abs() * 1.5, n_kv_heads=arch.n_kv_heads, rope_theta=10000.0,
                          rope_type="default"))


def method_for(cls: type, arch: Arch, slots: int, folder: Path, interval: int = 16, **knobs):
    """``cls`` with rows of ``slots`` slots (``budget = slots - interval``) and its run files made for ``arch``."""
    for name in getattr(cls, "run_files", ()):
        knobs.setdefault(name, run_file(name, arch, folder))
    return cls(budget=slots - interval, interval=interval, **knobs)


def compaction_inputs(method, arch: Arch, rows: int, slots: int, prompt: int = 8) -> tuple:
    """The arguments of one :func:`compact_rows` call of every row, full (``slots`` held), random keys and values in
    the arch's dtype, the query ring when the method keeps one, prompts of ``prompt`` tokens."""
    L, R, H, H_kv, S, D = arch.n_layers, rows, arch.n_heads, arch.n_kv_heads, slots, arch.head_dim
    dtype = DTYPES[arch.dtype_bytes]
    g = torch.Generator().manual_seed(0)
    keys = [torch.randn(R, H_kv, S, D, generator=g).to(dtype) for _ in range(L)]
    values = [torch.randn(R, H_kv, S, D, generator=g).to(dtype) for _ in range(L)]
    visible = torch.ones(L, R, H_kv, S, dtype=torch.bool)
    pos = torch.arange(S).expand(L, R, H_kv, S).clone()
    Q = method.query_window
    queries = torch.randn(L, R, H, Q, D, generator=g).to(dtype) if Q else None
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    row_keys = torch.arange(R, dtype=torch.long) + 1  # each row's sample key (random's priorities)
    attn_sum = torch.rand(L, R, H_kv, S, generator=g) if method.accumulates_attention else None  # h2o's sums
    return (keys, values, visible, pos, queries, torch.full((R,), prompt), torch.full((R,), S - 1),
            torch.ones(R, dtype=torch.bool), D**-0.5, inv_freq, row_keys, attn_sum)


def tracked_compaction(method, arch: Arch, rows: int, slots: int) -> int:
    """Peak tensor bytes of one compaction of ``rows`` full rows (inputs excluded)."""
    from snapstream_core.engine.compact import compact_rows

    method.prepare(torch.device("cpu"))
    args = compaction_inputs(method, arch, rows, slots)
    with LiveBytes() as mem:
        compact_rows(method, *args)
    return mem.peak


def modelled_compaction(method, arch: Arch, slots: int) -> int:
    """The memory model's compaction scratch per row (what the planner adds per row)."""
    return compaction_bytes(arch, slots, method.query_window, method.compaction_scratch(arch, slots))


# (rows, heads, KV heads, slots, layers, head dim, dtype bytes): tiny_llama-like, SmolLM2-like, Llama-8B-like heads
COMPACTION_SHAPES = [
    (2, 4, 2, 64, 2, 16, 4),
    (2, 4, 2, 128, 2, 16, 2),
    (2, 9, 3, 256, 30, 64, 4),
    (2, 9, 3, 256, 30, 64, 2),
    (1, 32, 8, 160, 4, 128, 2),
    (1, 32, 8, 640, 4, 128, 2),
]


def arch_of(H: int, H_kv: int, L: int, D: int, b: int) -> Arch:
    return Arch(n_layers=L, hidden=H * D, intermediate=4 * H * D, n_heads=H, n_kv_heads=H_kv, head_dim=D,
                vocab=1000, dtype_bytes=b)


def compaction_rows(shapes=COMPACTION_SHAPES) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, cls in decode_methods().items():
            for R, H, H_kv, S, L, D, b in shapes:
                arch = arch_of(H, H_kv, L, D, b)
                method = method_for(cls, arch, S, Path(tmp))
                tracked = tracked_compaction(method, arch, R, S)
                modelled = R * modelled_compaction(method, arch, S)
                out.append({"method": name, "rows": R, "heads": H, "kv_heads": H_kv, "slots": S, "layers": L,
                            "head_dim": D, "dtype_bytes": b, "tracked_bytes": tracked, "modelled_bytes": modelled,
                            "ratio": round(modelled / tracked, 3),
                            "tracked_per_row_head_slot": round(tracked / (R * H_kv * S), 1),
                            "modelled_per_row_head_slot": round(modelled / (R * H_kv * S), 1)})
                log.info("%s", out[-1])
    return out


# --------------------------------------------------------------------------------------------------------- compile
def llama(layers: int, hidden: int = 64, heads: int = 4, kv_heads: int = 2, intermediate: int = 128,
          vocab: int = 1000):
    """A random-weight Llama (tiny_llama's shape by default) of ``layers`` layers, fp32, eval."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096)
    model = LlamaForCausalLM(cfg).eval()
    model.set_attn_implementation("sdpa")
    return model


def timed_run(model, method, new: int, compile: bool) -> tuple[float, float]:
    """(wall seconds, first step's seconds) of one engine run of two 64-token prompts, ``new`` greedy tokens each."""
    from snapstream_core.engine import Engine, EngineItem
    from snapstream_core.sampling import SamplingConfig

    g = torch.Generator().manual_seed(0)
    items = [EngineItem(torch.randint(1, model.config.vocab_size, (64,), generator=g).tolist(), i, (0,), new)
             for i in range(2)]
    engine = Engine(model, method, SamplingConfig(max_new_tokens=new), eos=[], rows=2, compile=compile,
                    compile_backend="inductor")
    start = time.perf_counter()
    for _ in engine.run(items):
        pass
    return time.perf_counter() - start, engine.stats.first_step_s


def compile_case(layers: int, method_name: str, dims: dict) -> dict[str, float]:
    """Compile seconds of the engine's graphs for a random Llama of ``layers`` layers (``dims``: its widths) and
    ``method_name`` at default knobs but a small budget (inductor, CPU): the first compiled run's wall less a second
    one in the same process (its graphs cached), and the first step's own seconds (the decode step's compile) less
    the second run's. Run it in a fresh process with an empty inductor cache (:func:`compile_rows` does): inductor
    keeps compiled kernels and graphs on disk, and a warm cache hides most of the cost."""
    from snapstream_core.methods import METHODS, DecodeMethod

    cls = METHODS[method_name]
    method = cls(budget=48, interval=16) if issubclass(cls, DecodeMethod) else cls()
    model = llama(layers, **dims)
    cpu0 = cpu_seconds()
    first, first_step = timed_run(model, method, 24, compile=True)
    cpu1 = cpu_seconds()
    again, again_step = timed_run(model, method, 24, compile=True)
    cpu2 = cpu_seconds()
    return {"compile_s": round(first - again, 2), "step_compile_s": round(first_step - again_step, 2),
            "run_s": round(again, 2), "compile_cpu_s": round((cpu1 - cpu0) - (cpu2 - cpu1), 2)}


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its waited-for children (the C++ compiler inductor runs)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


SMOLLM2_WIDTHS = dict(hidden=576, heads=9, kv_heads=3, intermediate=1536, vocab=49152)


def compile_rows(layers=(2, 4), methods=("none", "rkv"), widths: bool = True) -> list[dict]:
    """:func:`compile_case` of the decode step alone (``none``) and with a compaction (``rkv``) for tiny_llama's
    widths at ``layers`` layers, and (``widths``) SmolLM2-135M's widths at the smallest count, each in a fresh
    process with an empty inductor cache (``TORCHINDUCTOR_CACHE_DIR``, FX graph cache off) compiling in-process
    (``TORCHINDUCTOR_COMPILE_THREADS=1``: its CPU seconds, the C++ compiler's included, are the work of one core
    whatever else loads the machine), beside the planner's CPU figure."""
    import json
    import os
    import subprocess
    import sys

    from evals.plan.compile_time import cpu_compile_seconds

    cases = [("tiny_llama", n, {}) for n in layers]
    cases += [("smollm2_widths", layers[0], SMOLLM2_WIDTHS)] if widths else []
    out = []
    for shape, n, dims in cases:
        for name in methods:
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                       "TORCHINDUCTOR_AUTOGRAD_CACHE": "0", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
                code = (f"import json; from bench.planner_terms import compile_case; "
                        f"print(json.dumps(compile_case({n}, {name!r}, {dims!r})))")
                done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                      check=True)
            got = json.loads(done.stdout.strip().splitlines()[-1])
            compaction = name != "none"
            out.append({"model": shape, "layers": n, "method": name, "graphs": 1 + compaction, "compile_threads": 1,
                        **got,
                        "modelled_cpu_s": round(cpu_compile_seconds(n, compaction), 1)})
            log.info("%s", out[-1])
    return out


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    log.info("wrote %s (%d rows)", path, len(rows))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["sampling", "compaction", "compile"], default=None)
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--sampling-shapes", default=",".join(f"{r}x{v}" for r, v in SAMPLING_SHAPES),
                   help="rows x vocab of the sampling calls, comma-separated")
    p.add_argument("--layers", default="2,4", help="layer counts of the compile timings, comma-separated")
    p.add_argument("--compile-methods", default="none,rkv", help="methods of the compile timings, comma-separated")
    p.add_argument("--no-widths", action="store_true", help="no compile timing at SmolLM2-135M's widths")
    args = p.parse_args(argv)
    sampling_shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.sampling_shapes.split(",")]
    layers = tuple(int(x) for x in args.layers.split(","))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = Path(args.out)
    if args.only in (None, "sampling"):
        write_csv(sampling_rows(sampling_shapes), out / "sampling.csv")
    if args.only in (None, "compaction"):
        write_csv(compaction_rows(), out / "compaction.csv")
    if args.only in (None, "compile"):
        write_csv(compile_rows(layers, tuple(args.compile_methods.split(",")), not args.no_widths),
                  out / "compile.csv")


if __name__ == "__main__":
    main()
