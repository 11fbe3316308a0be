"""The one memory model of a run: the prefill of one prompt, a decode row, a job, and the device memory they may use.

Pure arithmetic, no torch import: the planner (``evals.plan``, on a laptop), the prefill's documented bound
(:func:`snapstream_core.prefill.prefill_peak_bytes`), the runner's row choice on CUDA and ``make gpu-check`` all read
these functions. ``docs/memory.md`` derives every term; ``tests/test_memory_model.py`` checks the prefill and the
job peak against tensor allocations tracked on CPU (within 15%, never below).

Symbols: ``b`` bytes per element, ``L`` layers, ``H``/``H_kv`` query/KV heads, ``D`` head dim, ``d`` hidden, ``I``
MLP width, ``V`` vocabulary, ``T`` prompt tokens, ``C = min(chunk, T)``, ``S`` the slots a compressed layer holds
after its selection, ``w`` the query rows the selection scores with::

    prefill = T*d*b                                  residual stream
            + 2*T*H_kv*D*b                           one full layer of KV (the staging buffer)
            + (L-1)*(F.layer_bytes(S) + 9*S*H_kv)      layers already compressed (K, V in the method's KVFormat F:
                                                     2*S*H_kv*D*b for auto; bool validity, long position; L of them
                                                     for a quantized F: the codes of the layer being written)
            + max(C*(2d + 3I)*b,                     one chunk's MLP
                  C*(2d + 2(H + 2H_kv)D)*b             one chunk's attention projections
                    + [C<T]*(C*T*(1+b) + 2*T*H*D*b),   later chunks: sdpa's mask (bool + float), K/V repeated to H
                  3*H*w*T*4 + [b!=4]*2*T*H_kv*D*4    SnapKV window scores (fp32)
                    + n*H_kv*T*D*4 + m*H*T*4,          a scorer's own fp32 buffers (score_buffers = (n, m))
                  H_kv*P_T*PAIR_BYTES(b))              a decode-time method's prompt cut (P_T key pairs: R-KV T^2)
            + 2*C*D*4 + V*4                          RoPE cos/sin of a chunk, the last position's logits
            + [moments]*2*H*D*(D+1)*8                running query moments (float64 sums, held over the layer)
    (with moments, one chunk's attention is the larger of the above and its projections, mask and 4*C*H*D*8: the
    chunk's queries rotated back in float64 after the attention, when the repeated K/V are freed)
    row     = F.row_bytes(slots) + slots*L*H_kv      K/V (in the method's KVFormat F: 2*L*H_kv*D*b per slot for
                                                     auto) and the bool slot mask of one decode row
            + 8*(max_new + 1)                        its token buffer
            + V*(4 + s)                              float32 logits and the sampling temporaries (s: 0 greedy,
                                                     30 sampled, 50 with top-p: sampling_peak_per_entry)
            + (6d + 3I)*b + 2*H*slots*4              one step's activations and attention scores
            + [compacts]*slots*L*H_kv*8 + L*H*Q*D*b  a decode-time method's slot positions and query ring
    compaction = L*H*Q*D*b                           the query ring of every layer, gathered oldest first
               + max(scoring,                        the method's scores of every layer (compaction_scratch)
                     H_kv*slots*(4L + max(2*D*b + 8, ORDER_SLOT_BYTES)))
                                                     every layer's scores held while one layer's K/V move
    step    = max(V*s, F.read_bytes(slots))          a step's transient per row: the sampling, or (never at once:
                                                     attention ends before the logits) a quantized format's
                                                     dequantized K/V of one layer (0 for auto)
    job     = weights + rows*row + max(prefill + V*s, rows*step, rows*compaction)
              (the next item is prefilled, and its first tokens drawn, while the rows of the last one are held;
              a compaction runs between steps, never during a prefill)
"""

from __future__ import annotations

from dataclasses import dataclass

from snapstream_core.policies.kv_format import KVFormat

AUTO = KVFormat()  # the model's dtype: every figure as before quantized formats existed
GIB = 2**30
FLOAT32 = 4
PREFILL_CHUNK = 4096  # prompt tokens per chunk of the layer-major prefill (snapstream_core.prefill.DEFAULT_CHUNK)
# Hidden-sized and intermediate-sized buffers alive at once in one decode step of a Llama layer (no autograd): the
# residual, the normed input, q / attention output / o-projection (hidden each); gate, up and act(gate)*up.
STEP_HIDDEN = 6
STEP_INTER = 3
# Bytes per vocabulary entry per row that sampling (temperature > 0, any filters) allocates at its peak beside the
# float32 logits (the counter-based noise's int64 passes over the whole vocabulary, the sort of top-p and its
# outputs, the filtered copy): tracked with bench.live_bytes.LiveBytes around snapstream_core.engine.noise.pick_rows,
# 30.0 at 4 x 32,000 and 28.1-28.5 at larger row counts (bench/planner_terms.py, tests/test_sampling_terms.py).
# Greedy rows allocate only their argmax (0 per entry).
SAMPLING_TRACKED_BYTES_PER_ENTRY = 30
# The scratch of top-p's full-vocabulary sort, which LiveBytes cannot see (allocated and freed inside one op): on
# CUDA ATen's segmented radix sort keeps a second buffer of the float32 keys and of the int64 values beside the int64
# index it sorts (4 + 8 + 8). An estimate from the algorithm, not a measurement; added in full although the sort ends
# before the noise's peak (an upper bound).
SORT_SCRATCH_BYTES_PER_ENTRY = 20
SAMPLING_BYTES_PER_ENTRY = SAMPLING_TRACKED_BYTES_PER_ENTRY + SORT_SCRATCH_BYTES_PER_ENTRY  # the most, any settings
# Bytes per vocabulary entry per row that one sampling call's ops read and write (bench.op_traffic.OpTraffic around
# pick_rows, counted on CPU: every op's tensor inputs and outputs, views excluded; bench/planner_terms.py):
# greedy 4 (argmax reads the logits); temperature alone 328.8-340 (the noise's SplitMix64 passes over int64
# counters, the Gumbel transform, the division, the argmaxes); top-p adds 59, top-k 18 (measured 399 with top-p,
# 417 with both, at 4 x 32,000). Rounded up. The step time reads them (evals.plan.cost).
SAMPLING_TRAFFIC_GREEDY = 4
SAMPLING_TRAFFIC_SAMPLED = 344
SAMPLING_TRAFFIC_TOP_P = 60
SAMPLING_TRAFFIC_TOP_K = 20
SAMPLING_TRAFFIC_MAX = SAMPLING_TRAFFIC_SAMPLED + SAMPLING_TRAFFIC_TOP_P + SAMPLING_TRAFFIC_TOP_K


def sampling_peak_per_entry(temperature: float, top_k: int, top_p: float) -> int:
    """Bytes per vocabulary entry per row one sampling call allocates beside the logits at its peak, top-p's sort
    scratch included (0 for greedy)."""
    if temperature <= 0:
        return 0
    return SAMPLING_TRACKED_BYTES_PER_ENTRY + (SORT_SCRATCH_BYTES_PER_ENTRY if top_p < 1.0 else 0)


def sampling_traffic_per_entry(temperature: float, top_k: int, top_p: float) -> int:
    """Bytes per vocabulary entry per row one sampling call reads and writes (the logits read included)."""
    if temperature <= 0:
        return SAMPLING_TRAFFIC_GREEDY
    return (SAMPLING_TRAFFIC_SAMPLED + (SAMPLING_TRAFFIC_TOP_P if top_p < 1.0 else 0)
            + (SAMPLING_TRAFFIC_TOP_K if top_k > 0 else 0))


# An "80 GB" card reports 81,559 MiB of its 81,920 (79.65 GiB); the CUDA context takes about 0.55 GiB of it, so
# about 79.1 GiB can be allocated (measured on H100 and H200 site stacks, docs/plan.md).
REPORTED_SHARE = 81559 / 81920
CUDA_CONTEXT_GIB = 0.55
# Kept free below what can be allocated: CUDA-graph pools and the caching allocator's fragmentation, which
# torch.cuda.max_memory_allocated does not count. Estimate; make gpu-check records reserved - allocated.
MARGIN_GIB = 2.5
# Slots per block of a bounded decode read: an appending row reads its filled slots rounded up to this many (the
# engine's FlexAttention block mask, FlexAttention's default block; the eager step's rounding). The planner reads it.
READ_BLOCK = 128
# Bytes per key pair (i, j) a decode-time method's pairwise scoring holds at once beside the pair's cosine
# similarity in the keys' dtype (R-KV's redundancy, snapstream_core.methods.decode_scores.redundancy: the long
# indices of the near-duplicate search and the boolean masks). Tracked with bench.live_bytes.LiveBytes on CPU:
# 14.5 bytes per pair in float32 (tests/test_memory_model.py).
PAIR_EXTRA_BYTES = 11
# Bytes per (row, KV head, slot) of compact_order's ranking at its peak (the fp32 copy of the scores, the masked
# scores, topk's values and indices, the rank, the sort key and the order, masks): 44.5 tracked with
# bench.live_bytes.LiveBytes on CPU (bf16 scores; 40.5 in fp32), rounded up (bench/planner_terms.py).
ORDER_SLOT_BYTES = 48
# Per (row, KV head, slot): bytes of small tensors a scoring keeps beside its big ones (masks, per-row reductions,
# the pooled output's indices), the most seen in the trackings of bench/planner_terms.py.
SCORE_SLOT_SLACK = 16


def pair_bytes(dtype_bytes: int) -> int:
    """Bytes per key pair of a pairwise scoring: the similarity and :data:`PAIR_EXTRA_BYTES`."""
    return dtype_bytes + PAIR_EXTRA_BYTES


@dataclass(frozen=True)
class Arch:
    """What the memory model needs of a Llama-style GQA decoder."""

    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int

    @classmethod
    def of(cls, config, dtype_bytes: int) -> Arch:
        """From a transformers text config (``hidden_size``, ``num_hidden_layers``, ...)."""
        d, H = config.hidden_size, config.num_attention_heads
        return cls(n_layers=config.num_hidden_layers, hidden=d, intermediate=config.intermediate_size, n_heads=H,
                   n_kv_heads=config.num_key_value_heads, head_dim=getattr(config, "head_dim", None) or d // H,
                   vocab=config.vocab_size, dtype_bytes=dtype_bytes)

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values of one token in every layer (Llama-3.1-8B in bf16: 128 KiB)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes


def prefill_terms(a: Arch, T: int, slots: int, *, chunk: int, window: int = 0,
                  score_buffers: tuple[int, int] = (0, 0), moments: bool = False, pairs: int = 0,
                  fmt: KVFormat = AUTO) -> dict[str, int]:
    """The bytes :func:`snapstream_core.prefill.prefill_prompt` holds at its peak above the weights, by term.

    ``slots``: KV entries per KV head a compressed layer holds after its selection (``T`` for ``none``, the ring
    included for the ring methods); ``window``: the query rows the selection scores with (0: no SnapKV scoring);
    ``score_buffers``: the scorer's own fp32 buffers (``CompressionMethod.score_buffers``); ``moments``: whether the
    selection reads the running query moments (``CompressionMethod.query_moments`` is not None); ``pairs``: key
    pairs per KV head the selection scores pairwise (``method.key_pairs(T)`` when it cuts); ``fmt``: how the
    compressed layers store K/V (``method.kv_format``: :meth:`KVFormat.layer_bytes`, codes, scales and a KIVI
    layer's full-precision residual; the layer being prefilled is staged in the model's dtype, ``full_layer``, and
    a quantized format writes its codes while that staging is alive: ``L`` layers in the format, not ``L - 1``)."""
    b, L, H, H_kv, D, d = a.dtype_bytes, a.n_layers, a.n_heads, a.n_kv_heads, a.head_dim, a.hidden
    layer = fmt.layer_bytes(slots, H_kv, D, b)
    stored = L if fmt.quantized else L - 1
    C = min(chunk, T)
    attention = C * (2 * d + 2 * (H + 2 * H_kv) * D) * b
    if C < T:  # chunks after the first: explicit mask (bool + float) and K/V repeated to the H query heads
        attention += C * T * (1 + b)
    if moments:  # after attention (the repeated K/V are freed): the chunk's queries rotated back in float64
        attention = max(attention + (2 * T * H * D * b if C < T else 0), attention + 4 * C * H * D * 8)
    elif C < T:
        attention += 2 * T * H * D * b
    n, m = score_buffers
    scoring = (3 * H * window * T * FLOAT32 + (2 * T * H_kv * D * FLOAT32 if b != FLOAT32 else 0)
               + n * H_kv * T * D * FLOAT32 + m * H * T * FLOAT32)
    scoring = max(scoring, H_kv * pairs * pair_bytes(b))
    return {
        "residual": T * d * b,
        "full_layer": 2 * T * H_kv * D * b,
        "compressed_layers": stored * (layer + 9 * slots * H_kv),
        "chunk_peak": max(C * (2 * d + 3 * a.intermediate) * b, attention, scoring),
        "rope": 2 * C * D * FLOAT32,
        "logits": a.vocab * FLOAT32,
        "query_moments": 2 * H * D * (D + 1) * 8 if moments else 0,
    }


def row_terms(a: Arch, slots: int, max_new: int, *, compacts: bool = False, query_ring: int = 0, attn_sum: int = 0,
              sampling: int = SAMPLING_BYTES_PER_ENTRY, fmt: KVFormat = AUTO) -> dict[str, int]:
    """The bytes one decode row adds: its slots, token buffer, logits and sampling (``sampling`` bytes per
    vocabulary entry, :func:`sampling_peak_per_entry`; default the most), one step's temporaries; for a decode-time
    method (``compacts``) its slot positions and its ring of ``query_ring`` queries per layer, and with ``attn_sum``
    (H2O) each slot's accumulated attention, fp32 (``RowBatch.attn_sum``). ``fmt``: how the row stores K/V
    (``method.kv_format``): ``kv`` is :meth:`KVFormat.row_bytes` (codes, scales, minima and residual of a quantized
    format) and ``kv_read`` the dequantized copy of one layer its attention reads (:meth:`KVFormat.read_bytes`, a
    step's transient, never alive with the sampling's: :func:`job_terms` takes the larger; 0 in the model's dtype)."""
    b, L, H_kv, H, D = a.dtype_bytes, a.n_layers, a.n_kv_heads, a.n_heads, a.head_dim
    return {
        "kv": fmt.row_bytes(slots, L, H_kv, D, b),
        "kv_read": fmt.read_bytes(slots, H_kv, D, b),
        "slot_mask": slots * L * H_kv,
        "positions": slots * L * H_kv * 8 if compacts else 0,
        "query_ring": L * H * query_ring * D * b,
        "attn_sum": slots * L * H_kv * FLOAT32 if attn_sum else 0,
        "tokens": 8 * (max_new + 1),
        "logits": a.vocab * FLOAT32,
        "sampling": a.vocab * sampling,
        "activations": (STEP_HIDDEN * a.hidden + STEP_INTER * a.intermediate) * b + 2 * a.n_heads * slots * FLOAT32,
    }


def window_attention_bytes(a: Arch, slots: int, queries: int) -> int:
    """Bytes per row at the peak of one layer's :func:`snapstream_core.methods.decode_scores.window_attention`
    (``queries`` = Q, the query ring), the larger of its phases per (KV head, slot): the matmul's copy of the keys
    broadcast to the G query heads of a group beside its logits ``G*(D + Q)*b``; the logits scaled ``2*G*Q*b``; the
    GQA max's values and long indices ``G*Q*b + Q*(b + 8)``; the masked logits and their fp32 softmax
    ``Q*(2b + 4)`` and the pooled output; plus :data:`SCORE_SLOT_SLACK`."""
    b, D, Q = a.dtype_bytes, a.head_dim, queries
    G = a.n_heads // a.n_kv_heads
    per = max(G * (D + Q) * b, 2 * G * Q * b, G * Q * b + Q * (b + 8), Q * (2 * b + 4) + b + 8)
    return a.n_kv_heads * slots * (per + SCORE_SLOT_SLACK)


def redundancy_bytes(a: Arch, slots: int) -> int:
    """Bytes per row at the peak of one layer's :func:`snapstream_core.methods.decode_scores.redundancy` (R-KV's
    ``cal_similarity``) over ``slots`` keys per KV head: the normalised keys ``D*b`` and per key pair the larger of
    the masked similarities (``3b`` alive at once in the masked_fill chain, and two bool masks: ``3b + 2``) and the
    similarity with the near-duplicate search's long index and bool masks (``b + 10``); the (S, S) identity once
    (counted per row: an upper bound)."""
    b, D, S = a.dtype_bytes, a.head_dim, slots
    return a.n_kv_heads * S * (S * max(b + 10, 3 * b + 2) + D * b + 2 * b + SCORE_SLOT_SLACK) + S * S


def triattention_layer_bytes(a: Arch, slots: int, offsets: int) -> int:
    """Bytes per row at the peak of one layer's TriAttention scores
    (:func:`snapstream_core.triattention_scores.head_scores` and the normalisation), the larger of its phases per
    (KV head, slot): the keys copied in fp32 (``4*D``, alive throughout) beside their pairs' squared moduli and sum
    (``3*F*4 = 6*D``) and the series (``4*G``), or beside the series' two fp32 products per query head of the group
    and their sum (``12*G``); plus :data:`SCORE_SLOT_SLACK`; per row the phases of the ``offsets`` future offsets
    (angle, cos, sin: ``3*O*F*4``) and the two (H, F) coefficient arrays."""
    D, G, F = a.head_dim, a.n_heads // a.n_kv_heads, a.head_dim // 2
    per = max(10 * D + 4 * G, 4 * D + 12 * G) + SCORE_SLOT_SLACK
    return a.n_kv_heads * slots * per + (3 * offsets + 2 * a.n_heads) * F * FLOAT32


def compaction_bytes(a: Arch, slots: int, query_ring: int = 0, scoring: int = 0) -> int:
    """A compaction's scratch per row (:func:`snapstream_core.engine.compact.compact_rows`): every layer's query
    ring gathered oldest first (``query_ring`` queries per layer), then the larger of the method's scoring of every
    layer (``scoring``: ``DecodeMethod.compaction_scratch``, bytes per row at its peak) and the move of one layer
    (every layer's scores held, at most fp32, the order and the K or V gathered and selected, or the ranking)."""
    ring = a.n_layers * a.n_heads * query_ring * a.head_dim * a.dtype_bytes
    return ring + max(scoring, move_bytes(a, slots))


def move_bytes(a: Arch, slots: int) -> int:
    """Bytes per row at the move of one layer in a compaction: every layer's scores held (at most fp32), the order
    and the K or V gathered and selected, or the ranking (:data:`ORDER_SLOT_BYTES`)."""
    return a.n_kv_heads * slots * (FLOAT32 * a.n_layers + max(2 * a.head_dim * a.dtype_bytes + 8, ORDER_SLOT_BYTES))


def job_terms(a: Arch, weight_bytes: int, rows: int, *, slots: int, max_new: int, T: int, prefill_slots: int,
              window: int, chunk: int, score_buffers: tuple[int, int] = (0, 0), moments: bool = False,
              compacts: bool = False, query_ring: int = 0, attn_sum: int = 0, prefill_pairs: int = 0,
              compact_scratch: int = 0, sampling: int = SAMPLING_BYTES_PER_ENTRY,
              fmt: KVFormat = AUTO) -> dict[str, int]:
    """The peak of a job that holds ``rows`` decode rows of ``slots`` slots while it prefills a ``T``-token prompt
    and draws a sample's first token from the prefill's logits, or draws the rows' next tokens (the sampling scratch,
    ``sampling`` bytes per vocabulary entry and row, :func:`sampling_peak_per_entry`: a step's transient, never alive
    during a prefill), or compacts its rows (decode-time methods: ``compacts, query_ring`` and the ``prefill_pairs``
    of the prompt cut, ``method.row_memory``; the scoring's bytes per row ``compact_scratch``,
    ``method.compaction_scratch``). ``rows``: what the rows hold throughout; ``draw`` and ``compaction``: what the
    rows' draw or compaction needs beyond the prefill's peak (the three never overlap). ``fmt``: the method's
    ``kv_format`` (how the rows and the compressed layers store K/V; default the model's dtype)."""
    prefill = sum(prefill_terms(a, T, prefill_slots, chunk=chunk, window=window, score_buffers=score_buffers,
                                moments=moments, pairs=prefill_pairs, fmt=fmt).values())
    first_draw = a.vocab * sampling
    held = row_terms(a, slots, max_new, compacts=compacts, query_ring=query_ring, attn_sum=attn_sum,
                     sampling=sampling, fmt=fmt)
    draw = rows * max(held.pop("sampling"), held.pop("kv_read"))  # a step's transients: the read, then the draw
    compaction = rows * compaction_bytes(a, slots, query_ring, compact_scratch) if compacts else 0
    base = prefill + first_draw
    return {"weights": weight_bytes, "prefill": prefill, "first_draw": first_draw, "rows": rows * sum(held.values()),
            "draw": max(0, draw - base), "compaction": max(0, compaction - max(base, draw))}


def max_rows(a: Arch, weight_bytes: int, budget_bytes: float, **job) -> int:
    """The most rows whose :func:`job_terms` peak fits ``budget_bytes`` (0: not even one): the rows' held bytes
    beside the prefill's peak, beside their draw and beside their compaction. ``job``: as job_terms."""
    terms = job_terms(a, weight_bytes, 0, **job)
    fixed = sum(terms.values())
    held = row_terms(a, job["slots"], job["max_new"], compacts=job.get("compacts", False),
                     query_ring=job.get("query_ring", 0), attn_sum=job.get("attn_sum", 0),
                     sampling=job.get("sampling", SAMPLING_BYTES_PER_ENTRY), fmt=job.get("fmt", AUTO))
    draw = max(held.pop("sampling"), held.pop("kv_read"))
    row = sum(held.values())
    room = budget_bytes - weight_bytes
    n = max(0, int((budget_bytes - fixed) // row))  # beside the prefill
    n = min(n, max(0, int(room // (row + draw))))  # beside their draw
    if job.get("compacts"):  # beside their compaction
        per = row + compaction_bytes(a, job["slots"], job.get("query_ring", 0), job.get("compact_scratch", 0))
        n = min(n, max(0, int(room // per)))
    return n


def card_usable_bytes(memory_gib: float) -> float:
    """What can be allocated on a card sold as ``memory_gib`` GB after the CUDA context (80 -> ~79.1 GiB)."""
    return memory_gib * REPORTED_SHARE * GIB - CUDA_CONTEXT_GIB * GIB


def budget_bytes(usable: float, margin_gib: float = MARGIN_GIB) -> float:
    """The bytes a job's peak may reach: ``usable`` (allocatable) less the margin for graph pools and fragmentation."""
    return usable - margin_gib * GIB


def device_usable_bytes(device) -> int:
    """Bytes free on a CUDA ``device`` now (``torch.cuda.mem_get_info``): what this process can still allocate."""
    import torch

    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


# ---------------------------------------------------------------------------------------------- a method's geometry
