"""The engine's decode rows stored as KIVI's codes (``compression=kivi``): the layout of the eager
:class:`~snapstream_core.kivi_layer.KiviLayer` in fixed (rows, slots) buffers, written and read at fixed shapes with
per-row conditions as tensors (no host synchronisation; the step compiles with ``fullgraph=True``).

KIVI keeps every token (the ``append`` policy): slot s of a row holds position s, and the slot a row writes at a
step (``write_slot``, ``w``) is the number of tokens it stored before. Per layer, ``R`` rows, ``H`` KV heads, ``S``
slots, ``D`` head dim, ``G`` the group size, ``Rs`` the residual, ``P = D * bits / 8``:

- ``keys`` / ``values``: (R, H, S, P) uint8 packed codes of each slot;
- ``key_scale`` / ``key_min``: (R, H, ceil(S / G), D); ``value_scale`` / ``value_min``: (R, H, S, D / G), the
  model's dtype;
- ``key_ring``: (R, H, Rs, D), slot s at ``s % Rs``; ``value_ring``: (R, H, Rs + 1, D), slot s at
  ``s % (Rs + 1)``: the full-precision tokens.

A step writes the new token into both rings, then returns every slot dequantized (one float32 buffer per tensor,
cast to the model's dtype), the row's full-precision ones overwritten from the rings: keys at slots
``[Rs * floor(w / Rs), w]``, values at ``[max(w - Rs, 0), w]`` (slots past ``w`` are hidden by ``visible``).
After that, as the official code does after its attention: a row whose key ring is full (``(w + 1) % Rs == 0``)
writes the ring's codes and its ``Rs / G`` groups' scales, and a row with ``w >= Rs`` quantizes the value at slot
``w - Rs``. Rows the condition does not hold for write back what they read (a gather, a ``torch.where``, a
scatter), so every row runs the same operations.

``DecodeKernels.zeros`` (a CPU kernel's K/V layout) is not used: the codes are not a layout it reads.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from snapstream_core.cache import CompressedCache
from snapstream_core.engine.rows import RowCache, SlotLayer
from snapstream_core.policies.kv_format import KVFormat
from snapstream_core.quant.kivi import (
    dequantize_keys,
    dequantize_values,
    pack,
    quantize_keys,
    quantize_values,
    unpack_float,
)

STATE = ("keys", "key_scale", "key_min", "values", "value_scale", "value_min", "key_ring", "value_ring")


def _from_ring(out: torch.Tensor, ring: torch.Tensor, first: torch.Tensor) -> None:
    """Overwrite, in ``out`` (R, H, S, D), each row's slots ``[first, first + n)`` (cut at S) with the ring's
    (R, H, n, D) full-precision tokens, slot s at ring index ``s % n``; ``first`` (R,) long. Slots past a row's
    written one take stale ring entries: ``visible`` hides them."""
    R, H, S, D = out.shape
    n = ring.shape[2]
    slots = (first[:, None] + torch.arange(n, device=first.device)).clamp(max=S - 1)  # (R, n): cut at S
    src = ring.gather(2, (slots % n)[:, None, :, None].expand(R, H, n, D))  # a cut slot's own entry: no conflict
    out.scatter_(2, slots[:, None, :, None].expand(R, H, n, D), src.to(out.dtype))


class KiviRowCache(RowCache):
    """Fixed rows of KIVI storage (see the module docstring); ``visible`` (L, R, H, S) bool and ``write_slot`` (R,)
    long as :class:`RowCache`. ``state[name]`` is a list over layers of each tensor of :data:`STATE`."""

    def __init__(self, fmt: KVFormat, state: dict[str, list[torch.Tensor]], visible: torch.Tensor,
                 dtype: torch.dtype):
        Cache.__init__(self, layers=[SlotLayer(k, v) for k, v in zip(state["keys"], state["values"])])
        for layer in self.layers:
            layer.dtype = dtype  # what attention reads; the codes themselves are uint8
        self.fmt, self.state, self.visible, self.dtype = fmt, state, visible, dtype
        self.keys, self.values = state["keys"], state["values"]
        self.write_slot: torch.Tensor | None = None
        if visible.is_cuda and visible._base is None:  # the buffers themselves, not a row's view
            for t in (*(t for name in STATE for t in state[name]), visible):
                torch._dynamo.mark_static_address(t)  # mutated in place by the graph: CUDA graphs keep the address

    @classmethod
    def empty(cls, rows: int, slots: int, like: CompressedCache, zeros=None) -> KiviRowCache:
        """Zeroed rows of ``slots`` slots for the format, heads, head dim, dtype and device of ``like`` (a prefilled
        cache of KIVI layers); ``zeros`` is not used (see the module docstring)."""
        fmt = like.method.kv_format
        first = like.layers[0]
        if fmt.kind != "kivi" or getattr(first, "key_ring", None) is None:
            raise RuntimeError("snapstream_core: KiviRowCache needs a prefilled cache of kivi layers")
        H, D = first.keys.shape[1], first.key_ring.shape[-1]
        dtype, device = first.key_ring.dtype, first.key_ring.device
        G, Rs, P = fmt.group_size, fmt.residual, D * fmt.bits // 8
        shapes = {
            "keys": ((rows, H, slots, P), torch.uint8), "values": ((rows, H, slots, P), torch.uint8),
            "key_scale": ((rows, H, -(-slots // G), D), dtype), "key_min": ((rows, H, -(-slots // G), D), dtype),
            "value_scale": ((rows, H, slots, D // G), dtype), "value_min": ((rows, H, slots, D // G), dtype),
            "key_ring": ((rows, H, Rs, D), dtype), "value_ring": ((rows, H, Rs + 1, D), dtype),
        }
        L = len(like.layers)
        state = {name: [torch.zeros(shape, dtype=dt, device=device) for _ in range(L)]
                 for name, (shape, dt) in shapes.items()}
        visible = torch.zeros(L, rows, H, slots, dtype=torch.bool, device=device)
        return cls(fmt, state, visible, dtype)

    def view(self, hi: int, slots: int, lo: int = 0) -> KiviRowCache:
        """Rows ``[lo, hi)`` over their first ``slots`` slots (and the key groups that cover them), sharing
        storage; the rings whole."""
        if lo == 0 and hi == self.rows and slots == self.slots:
            return self
        groups = -(-slots // self.fmt.group_size)
        cut = {"keys": slots, "values": slots, "value_scale": slots, "value_min": slots, "key_scale": groups,
               "key_min": groups, "key_ring": None, "value_ring": None}
        state = {name: [t[lo:hi, :, :n] for t in self.state[name]] for name, n in cut.items()}
        return KiviRowCache(self.fmt, state, self.visible[:, lo:hi, :, :slots], self.dtype)

    def _layer(self, i: int) -> list[torch.Tensor]:
        return [self.state[name][i] for name in STATE]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Write (R, H, 1, D) at each row's ``write_slot``; return the (R, H, S, D) keys/values attention reads, in
        the model's dtype; then quantize what left the full-precision windows."""
        kc, ks, km, vc, vs, vm, kr, vr = self._layer(layer_idx)
        G, Rs, bits = self.fmt.group_size, self.fmt.residual, self.fmt.bits
        w = self.write_slot
        # storage, not a graph: what is stored (and read back dequantized) never carries autograd history, also
        # when a caller steps outside no_grad (the step API driven by hand)
        key_states, value_states = key_states.detach(), value_states.detach()
        R, H, S, _ = kc.shape
        D = key_states.shape[-1]
        kr.scatter_(2, (w % Rs)[:, None, None, None].expand(R, H, 1, D), key_states.to(kr.dtype))
        vr.scatter_(2, (w % (Rs + 1))[:, None, None, None].expand(R, H, 1, D), value_states.to(vr.dtype))

        keys = dequantize_keys(unpack_float(kc, bits), ks, km, G, self.dtype)
        values = dequantize_values(unpack_float(vc, bits), vs, vm, G, self.dtype)
        _from_ring(keys, kr, (w // Rs) * Rs)  # the keys since the last multiple of Rs, the new one included
        _from_ring(values, vr, (w - Rs).clamp(min=0))  # the latest Rs values and the new one

        self._flush_keys(w, kc, ks, km, kr)
        self._push_value(w, vc, vs, vm, vr)
        return keys, values

    def _flush_keys(self, w, kc, ks, km, kr) -> None:
        """Rows whose key ring is full after this step write its codes at slots ``[w + 1 - Rs, w]`` and its groups'
        scales and minima (the ring holds those slots in order: they start at a multiple of ``Rs``)."""
        G, Rs, bits = self.fmt.group_size, self.fmt.residual, self.fmt.bits
        R, H, S, P = kc.shape
        D, n_groups = kr.shape[-1], ks.shape[2]
        due = ((w + 1) % Rs == 0)[:, None, None, None]
        start = (w + 1 - Rs).clamp(min=0)
        codes, scale, mn = quantize_keys(kr, G, bits)
        idx = (start[:, None] + torch.arange(Rs, device=w.device)).clamp(max=S - 1)  # (R, Rs)
        idx = idx[:, None, :, None].expand(R, H, Rs, P)
        kc.scatter_(2, idx, torch.where(due, pack(codes, bits), kc.gather(2, idx)))
        groups = (start // G)[:, None] + torch.arange(Rs // G, device=w.device)
        groups = groups.clamp(max=n_groups - 1)[:, None, :, None].expand(R, H, Rs // G, D)
        ks.scatter_(2, groups, torch.where(due, scale, ks.gather(2, groups)))
        km.scatter_(2, groups, torch.where(due, mn, km.gather(2, groups)))

    def _push_value(self, w, vc, vs, vm, vr) -> None:
        """Rows with ``w >= Rs`` quantize the value at slot ``w - Rs`` (it left the ``Rs`` latest)."""
        G, Rs, bits = self.fmt.group_size, self.fmt.residual, self.fmt.bits
        R, H, S, P = vc.shape
        D = vr.shape[-1]
        due = (w >= Rs)[:, None, None, None]
        slot = (w - Rs).clamp(min=0, max=S - 1)
        old = vr.gather(2, (slot % (Rs + 1))[:, None, None, None].expand(R, H, 1, D))
        codes, scale, mn = quantize_values(old, G, bits)
        idx = slot[:, None, None, None]
        at = idx.expand(R, H, 1, P)
        vc.scatter_(2, at, torch.where(due, pack(codes, bits), vc.gather(2, at)))
        at = idx.expand(R, H, 1, D // G)
        vs.scatter_(2, at, torch.where(due, scale, vs.gather(2, at)))
        vm.scatter_(2, at, torch.where(due, mn, vm.gather(2, at)))

    def load(self, row: int, prefix: CompressedCache) -> tuple[int, int, int, int]:
        """Copy the batch-1 KIVI ``prefix`` (codes, scales, minima, rings) into ``row``; its schedule as
        :meth:`RowCache.load` (slot T next, never wrapping)."""
        layers = prefix.layers
        for layer in layers:
            if layer.pending or getattr(layer, "key_ring", None) is None:
                raise RuntimeError("snapstream_core: KiviRowCache.load needs a prefilled cache of kivi layers")
        if prefix.method.kv_format != self.fmt:
            raise RuntimeError(f"snapstream_core: a {prefix.method.kv_format.label} prefix in "
                               f"{self.fmt.label} rows")
        schedule = type(layers[0]).row_schedule([layer.schedule() for layer in layers])
        n = schedule[-1]
        if n > self.slots:
            raise RuntimeError(f"snapstream_core: a prefix of {n} slots does not fit {self.slots} row slots")
        for i, layer in enumerate(layers):
            for name, dst in zip(STATE, self._layer(i)):
                src = getattr(layer, name)[0]
                dst[row, :, : src.shape[1]] = src
            self.visible[i, row] = False
            self.visible[i, row, :, :n] = True
        return schedule

    def nbytes_per_row(self) -> int:
        """Bytes of one row's storage in every layer: codes, scales, minima and rings."""
        return sum(t[0].numel() * t.element_size() for name in STATE for t in self.state[name])

    def bytes_for(self, slots: int) -> int:
        """Bytes of a row of ``slots`` slots: ``KVFormat.row_bytes``."""
        kr = self.state["key_ring"][0]
        L, H, D = len(self.state["keys"]), kr.shape[1], kr.shape[-1]
        return self.fmt.row_bytes(slots, L, H, D, kr.element_size())
