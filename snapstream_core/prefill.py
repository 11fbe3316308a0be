"""Prefill one prompt into a :class:`CompressedCache` in bounded memory: layer-major, chunked, last logits only.

``prefill_prompt(model, ids, method)`` runs a Llama-architecture decoder (``LlamaModel``: SmolLM2, Llama-3.x,
DeepSeek-R1-Distill-Llama) one decoder layer at a time over the whole prompt:

1. ``h = embed_tokens(ids)``, the (T, hidden) residual stream, kept for the whole prefill;
2. for each decoder layer: run ``h`` through it ``chunk_size`` tokens at a time (``h`` is overwritten chunk by chunk:
   a chunk's output depends only on its own input and on the keys/values of the earlier chunks, already stored);
   its keys/values fill one (T, H_kv, D) staging buffer, and the post-RoPE queries of the last ``window`` prompt
   positions (those SnapKV scores with; the window may span chunks) are kept; then the layer's
   :class:`~snapstream_core.layer.CompressedLayer` receives the full keys/values and runs its selection
   (``finish_prefill``) exactly as in the one-pass prefill, and the staging buffer is dropped;
3. ``lm_head(norm(h[:, -1:]))``: logits for the last position only.

Memory: the peak above the weights is :func:`snapstream_core.memory.prefill_terms` (residual stream, one full layer
of KV, the layers already compressed, the largest of one chunk's MLP / attention / SnapKV scoring, RoPE, the last
logits; ``docs/memory.md`` derives it, ``tests/test_prefill_memory.py`` checks it against allocations tracked on CPU).
The one-pass prefill instead holds ``T`` positions of every activation, and generation with ``model(...)`` without
``logits_to_keep`` holds ``T * V * 4`` bytes of logits.

Exactness: with ``chunk_size >= T`` the decoder layers see exactly the inputs (mask, positions, RoPE) of the one-pass
``model(...)`` forward, so the cache and the logits are bit-identical to it (and to ``generate``'s prefill). With
smaller chunks, attention over the earlier chunks runs as separate matrix products: equal up to float rounding.

Other architectures fall back to one forward with ``logits_to_keep=1`` (bounded logits, unbounded activations).
"""

from __future__ import annotations

import logging

import torch
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.masking_utils import create_causal_mask
from transformers.models.llama.modeling_llama import LlamaModel

from snapstream_core.api import make_cache
from snapstream_core.attention import attach
from snapstream_core.cache import ACTIVE_LAYER, CompressedCache
from snapstream_core.memory import PREFILL_CHUNK, Arch, prefill_terms
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.moments import QueryMoments

log = logging.getLogger(__name__)

# Default chunk: prompts up to this length run as one chunk per layer, bit-identical to the one-pass forward (every
# test prompt is shorter); at 128k its boolean SDPA mask is 4096 * 128k bytes = 512 MiB, its MLP activations
# 3 * 4096 * 14336 * 2 bytes = 336 MiB on Llama-3.1-8B bf16.
DEFAULT_CHUNK = PREFILL_CHUNK


class _StagingLayer(CacheLayerMixin):
    """The full keys/values of the one decoder layer being prefilled, filled chunk by chunk, plus the post-RoPE
    queries of the last ``rows`` prompt positions.

    It stands in for a :class:`CompressedLayer` with its selection pending: the registered attention function
    (``snapstream_core.attention``) runs the stock attention and hands it the chunk's queries through
    :meth:`finish_prefill`, which only keeps the tail the selection needs.
    """

    is_sliding = False
    is_compileable = False

    def __init__(self, total: int, rows: int, moments_skip: int | None = None, inv_freq: torch.Tensor | None = None,
                 attention_sums: bool = False):
        super().__init__()
        self.total = total  # prompt length T
        self.rows = rows  # query rows the selection reads (the last ``rows`` positions)
        self.moments_skip = moments_skip  # the method's query_moments(T): None, or the leading tokens not counted
        self.inv_freq = inv_freq
        self.moments: QueryMoments | None = None
        self.attention_sums = attention_sums  # sum each key's attention over every prompt query (h2o)
        self.attn_sum: torch.Tensor | None = None  # (1, H_kv, T) float32 when attention_sums
        self.chunk_query: torch.Tensor | None = None  # the chunk's post-RoPE queries, until sum_attention
        self.layer_idx = 0
        self.filled = 0
        self.pending = True  # read by the attention function: hand the queries over after attention
        self.query_tail: torch.Tensor | None = None
        self.scaling = 1.0

    def start(self, layer_idx: int) -> None:
        self.layer_idx, self.filled = layer_idx, 0
        self.keys = self.values = self.query_tail = self.attn_sum = None
        self.moments = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def get_seq_length(self) -> int:
        return self.filled

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.filled + query_length, 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Store (1, H_kv, q, D) keys/values of the next chunk; return those of every position so far."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        q = key_states.shape[-2]
        if self.filled == 0 and q == self.total:  # one chunk: keep the tensors as the one-pass forward does
            self.keys, self.values = key_states, value_states
        else:
            if self.keys is None:  # one (1, H_kv, T, D) buffer per layer: no concatenation copies
                B, H_kv, _, D = key_states.shape
                self.keys = key_states.new_empty(B, H_kv, self.total, D)
                self.values = value_states.new_empty(B, H_kv, self.total, D)
            self.keys[:, :, self.filled : self.filled + q] = key_states
            self.values[:, :, self.filled : self.filled + q] = value_states
        self.filled += q
        self.pending = True
        return self.keys[:, :, : self.filled], self.values[:, :, : self.filled]

    def sum_attention(self) -> None:
        """Add the last chunk's queries' causal attention on the keys so far to ``attn_sum`` (h2o:
        :func:`~snapstream_core.attention_sums.prompt_attention`), after the decoder layer ran the chunk."""
        from snapstream_core.attention_sums import prompt_attention

        query, self.chunk_query = self.chunk_query, None
        if self.attn_sum is None:
            self.attn_sum = torch.zeros(query.shape[0], self.keys.shape[1], self.total, device=query.device)
        self.attn_sum[:, :, : self.filled] += prompt_attention(query, self.keys[:, :, : self.filled], self.scaling)

    def finish_prefill(self, query: torch.Tensor, key_valid, positions, scaling: float) -> None:
        """Called by the attention function after the chunk's attention: add the chunk's queries to the running
        moments (when the selection reads them) and keep the last ``rows`` query rows."""
        self.scaling = scaling
        if self.moments_skip is not None:
            if self.moments is None:
                self.moments = QueryMoments(self.moments_skip, self.inv_freq)
            q = query.shape[2]
            self.moments.add(query, positions[:, -q:].expand(query.shape[0], q), key_valid[:, -q:])
        if self.attention_sums:  # summed by sum_attention once the layer's chunk is done (its scratch freed)
            self.chunk_query = query
        if self.rows == 0:
            return
        tail = query[:, :, -self.rows :]
        if self.query_tail is not None and tail.shape[2] < self.rows:  # the window spans chunks
            tail = torch.cat([self.query_tail, tail], dim=2)[:, :, -self.rows :]
        self.query_tail = tail.clone()  # not a view: the chunk's queries are freed


class _StagingCache(Cache):
    """A one-layer cache serving every decoder layer in turn (layer-major prefill)."""

    def __init__(self, layer: _StagingLayer, n_layers: int):
        super().__init__(layers=[layer] * n_layers)
        self.staging = layer

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        ACTIVE_LAYER.set(self.staging)
        return self.staging.update(key_states, value_states)


def prefill_peak_bytes(
    config, prompt_len: int, slots: int, *, chunk_size: int | None = None, window: int = 0, dtype_bytes: int = 4,
    score_buffers: tuple[int, int] = (0, 0), moments: bool = False,
) -> int:
    """Tensor bytes :func:`prefill_prompt` holds at its peak above the weights (sdpa attention, batch 1): the sum of
    :func:`snapstream_core.memory.prefill_terms` (the model the planner uses too).

    Args:
        config: the model's text config. prompt_len: T. slots: KV entries per KV head a compressed layer holds after
            its selection (``method.prefill_slots(T)``). window: query rows the selection scores with
            (``method.query_rows(T)``; 0 without SnapKV scoring). dtype_bytes: bytes per element of the activations and
            the cache. score_buffers: ``method.score_buffers(T)``. moments: ``method.query_moments(T) is not None``.
    """
    chunk = DEFAULT_CHUNK if chunk_size is None else chunk_size
    terms = prefill_terms(Arch.of(config, dtype_bytes), prompt_len, slots, chunk=chunk, window=window,
                          score_buffers=score_buffers, moments=moments)
    return sum(terms.values())


def layer_major(model) -> bool:
    """Whether ``model`` has the structure the layer-major prefill drives (a ``LlamaModel`` under an ``lm_head``)."""
    return isinstance(getattr(model, "model", None), LlamaModel) and hasattr(model, "lm_head")


@torch.no_grad()
def prefill_prompt(
    model, ids: torch.Tensor, method: CompressionMethod, *, chunk_size: int | None = None
) -> tuple[CompressedCache, torch.Tensor]:
    """Prefill one prompt and compress it, in bounded memory (see the module docstring for the peak formula).

    Args:
        model: a causal LM; layer-major for ``LlamaModel`` decoders, else one forward with ``logits_to_keep=1``.
        ids: (1, T) long prompt ids (no padding).
        method: the compression method.
        chunk_size: prompt tokens per chunk within a layer (default ``DEFAULT_CHUNK``); ``>= T`` is bit-identical to
            the one-pass forward.

    Returns:
        The compressed cache of batch 1 (as ``generate``'s prefill leaves it: ``get_seq_length() == T``, decode
        positions continue at ``T``), and the last position's logits (1, V) float32.
    """
    if ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
        raise ValueError(f"prefill_prompt: ids must be (1, T) with T >= 1, got {tuple(ids.shape)}")
    chunk = DEFAULT_CHUNK if chunk_size is None else chunk_size
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"gen.prefill_chunk: must be an integer >= 1, got {chunk_size!r}")
    attach(model)
    cache = make_cache(model, method)
    T = ids.shape[1]
    positions = torch.arange(T, device=ids.device)[None]
    if not layer_major(model):
        log.warning("prefill: %s is not a LlamaModel decoder: one-pass prefill (activations not chunked)",
                    type(model).__name__)
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions,
                    past_key_values=cache, logits_to_keep=1)
        return cache, out.logits[:, -1, :].float()

    decoder: LlamaModel = model.model
    n_layers = len(cache.layers)
    staging = _StagingLayer(T, method.query_rows(T), method.query_moments(T), cache.inv_freq,
                            getattr(method, "accumulates_attention", False))
    staged = _StagingCache(staging, n_layers)
    hidden = decoder.embed_tokens(ids)  # (1, T, d): the residual stream
    spans = [(s, min(s + chunk, T)) for s in range(0, T, chunk)]
    for i, decoder_layer in enumerate(decoder.layers[:n_layers]):
        staging.start(i)
        for s, e in spans:
            h = hidden[:, s:e]
            pos = positions[:, s:e]
            mask = create_causal_mask(config=decoder.config, inputs_embeds=h, attention_mask=None,
                                      past_key_values=staged, position_ids=pos)
            out = decoder_layer(h, attention_mask=mask, position_ids=pos, past_key_values=staged, use_cache=True,
                                position_embeddings=decoder.rotary_emb(h, position_ids=pos))
            if staging.attention_sums:
                staging.sum_attention()
            if e - s == T:
                hidden = out
            else:
                hidden[:, s:e] = out
            del out, h, mask
        _compress(cache.layers[i], staging, T, positions)
        staging.start(i)  # drop the staging buffer before the next layer allocates its own
    last = decoder.norm(hidden[:, -1:])
    del hidden
    return cache, model.lm_head(last)[:, -1, :].float()


def _compress(layer, staging: _StagingLayer, T: int, positions: torch.Tensor) -> None:
    """Hand a layer's full prefill keys/values to its :class:`CompressedLayer` and run its selection, as the
    one-pass prefill does right after that layer's attention."""
    keys, values = staging.keys, staging.values
    layer.update(keys, values)
    if layer.pending:
        query = staging.query_tail
        if query is None:  # the selection reads no query (StreamingLLM, or nothing dropped)
            H = keys.shape[1]  # any head count: unused
            query = keys.new_empty(keys.shape[0], H, 0, keys.shape[-1])
        valid = torch.ones(1, T, dtype=torch.bool, device=keys.device)
        layer.finish_prefill(query, valid, positions, staging.scaling, staging.moments, staging.attn_sum)
