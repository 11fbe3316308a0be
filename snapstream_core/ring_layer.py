"""The ``ring`` policy's eager cache layer (``streaming_llm``, ``snapstream``): a frozen prefix of the kept prompt
and a fixed ring of the latest tokens, allocated whole at the prefill (the life of a layer and its invariants:
:mod:`snapstream_core.layer`)."""

from __future__ import annotations

from typing import Any

import torch

from snapstream_core.layer import CompressedLayer, gather_tokens


class RingLayer(CompressedLayer):
    """The ``ring`` policy: a frozen prefix of ``n_frozen`` slots and a ring of ``ring`` slots for the latest
    tokens, allocated whole at the prefill; a decode step writes its token in place."""

    def __init__(self, method: Any, *args, **kwargs):
        super().__init__(method, *args, **kwargs)
        self.ring = method.ring

    def _keep(self, keys, values, idx, valid, pos, n_frozen: int) -> None:
        # One allocation for the whole generation: frozen prefix + ring.
        B, H_kv, n_keep = idx.shape
        D = keys.shape[-1]
        S = n_frozen + self.ring
        self.keys = keys.new_zeros(B, H_kv, S, D)
        self.values = values.new_zeros(B, H_kv, S, D)
        self.valid = torch.zeros(B, H_kv, S, dtype=torch.bool, device=keys.device)
        self.pos = torch.zeros(B, H_kv, S, dtype=torch.long, device=keys.device)
        self.keys[:, :, :n_keep] = gather_tokens(keys, idx)
        self.values[:, :, :n_keep] = gather_tokens(values, idx)
        self.valid[:, :, :n_keep] = valid
        self.valid[:, :, n_keep:] = True  # free ring slots become visible only once a decoded token is in them
        self.pos[:, :, :n_keep] = pos
        self.n_frozen, self.filled = n_frozen, n_keep - n_frozen

    def _write(self, k: torch.Tensor, v: torch.Tensor):
        if k.shape[-2] == 1:  # the decode step: in place, few ops
            return self._ring_write_one(k, v)
        return self._ring_write_many(k, v, self._next_positions(k.shape[-2]))

    def _ring_write_one(self, k: torch.Tensor, v: torch.Tensor):
        """One decoded token (B, H_kv, 1, D) into its ring slot, in place: K and V (and the validity bit when it may
        overwrite padding; its position is written lazily, see ``SlotIndex``). Two copies, no allocation, no host
        synchronisation; the returned views are reused while the number of slots does not change."""
        slot = self.n_frozen + self.filled % self.ring
        if self.filled >= self.ring:
            self.aligned = False  # the oldest ring token is overwritten
            if self.has_invalid:  # it may be padding seeded by the prefill (free slots are already valid)
                self.valid[:, :, slot] = True
        self.keys.narrow(2, slot, 1).copy_(k)
        self.values.narrow(2, slot, 1).copy_(v)
        self.new_slots = slice(slot, slot + 1)
        n = self.n_frozen + min(self.filled + 1, self.ring)
        self.ring_written(self.filled, n)  # its position is written by the next flush_positions
        self.filled += 1
        if n != self._view_n:
            self._kv_view = (self.keys[:, :, :n], self.values[:, :, :n])
            self._view_n = n
        return self._kv_view

    def _ring_write_many(self, k: torch.Tensor, v: torch.Tensor, new_pos: torch.Tensor):
        """Several tokens at once after prefill (a continued prompt): attend over the current slots plus all new
        tokens, then keep the newest ``ring`` of them in the ring."""
        B, H_kv, q, _ = k.shape
        n = self._slots_now()
        out_k = torch.cat([self.keys[:, :, :n], k], dim=-2)
        out_v = torch.cat([self.values[:, :, :n], v], dim=-2)
        new_pos_h = new_pos[:, None, :].expand(B, H_kv, q)
        self.set_view(
            torch.cat([self.valid[..., :n], self.valid.new_ones(B, H_kv, q)], dim=-1),
            torch.cat([self.pos[..., :n], new_pos_h], dim=-1),
        )
        self.new_slots = slice(n, n + q)
        self.aligned = False
        for i in range(max(q - self.ring, 0), q):
            slot = self.n_frozen + self.filled % self.ring
            self.keys[:, :, slot] = k[:, :, i]
            self.values[:, :, slot] = v[:, :, i]
            self.valid[:, :, slot] = True
            self.pos[:, :, slot] = new_pos_h[..., i]
            self.filled += 1
        return out_k, out_v

    def _slots_now(self) -> int:
        return self.n_frozen + min(self.filled, self.ring)

    def _slots_after(self, q: int) -> int:
        if q == 1:
            return self.n_frozen + min(self.filled + 1, self.ring)
        return self._slots_now() + q

    def tokens_held(self) -> int:
        if self.keys is None:
            return 0
        return self.keys.shape[-2] if self.pending else self._slots_now()

    def schedule(self) -> tuple[int, int, int, int]:
        """Decoded tokens go round the ring after the frozen prefix, from the slot the prefill's seed reached."""
        return self.n_frozen, self.filled, self.ring, self._slots_now()
