"""Per-slot bookkeeping of a compressed cache layer: validity and original position of each slot, kept exact but
written lazily, so that a decode step of a ring writes only K and V.

Decode steps of a fixed-size ring never read positions unless the batch holds padding, positions are ``in_cache``
or a multi-token update comes; so a ring write only counts itself, and whoever needs positions calls
:meth:`SlotIndex.flush_positions` (or :meth:`SlotIndex.slot_view`, which does) first. Reading an attribute never
writes anything.
"""

from __future__ import annotations

import torch


class SlotIndex:
    """Mixin of :class:`~snapstream_core.layer.CompressedLayer`: ``valid`` (B, H_kv, S) bool, ``pos`` (B, H_kv, S)
    long, ``next_pos`` (B,) long, and what the last update returned, for the attention function (``slot_view()``,
    ``new_slots``). The host class provides ``ring`` and ``n_frozen``.

    Invariants:

    - ``pos``/``next_pos`` are exact except for the last ``_pending`` ring writes (fill counts ``_pending_from`` on):
      the m-th of them (m = 0, 1, ...) holds the token at position ``next_pos + m`` of its row;
      :meth:`flush_positions` writes them and clears ``_pending``.
    - The last update returned either the first ``view_n`` slots of the storage (``_view is None``) or, for a
      multi-token update of a ring, the concatenation held in ``_view`` (storage slots + new tokens).
    """

    ring: int | None
    n_frozen: int

    def init_slot_index(self) -> None:
        self.valid: torch.Tensor | None = None
        self.pos: torch.Tensor | None = None
        self.next_pos: torch.Tensor | None = None
        self._pending = 0
        self._pending_from = 0
        self.view_n: int | None = None
        self._view: tuple[torch.Tensor, torch.Tensor] | None = None
        self.new_slots: slice | None = None  # the slots (of the returned view) the last update wrote

    def ring_written(self, filled: int, n_slots: int) -> None:
        """A decoded token went into the ring at fill count ``filled``; the update returns the first ``n_slots``."""
        if not self._pending:
            self._pending_from = filled
        self._pending += 1
        self.view_n, self._view = n_slots, None

    def set_view(self, valid: torch.Tensor, pos: torch.Tensor) -> None:
        """The last update returned slots that are not a prefix of the storage: (B, H_kv, S') validity/positions."""
        self._view, self.view_n = (valid, pos), None

    def flush_positions(self) -> None:
        """Write the positions of the pending ring writes: the m-th pending token of a row is at that row's
        ``next_pos + m``; only the last ``ring`` writes are still in the ring. At most two slot ranges (the ring
        wraps), so no index tensor is built."""
        m = self._pending
        if not m:
            return
        self._pending = 0
        keep = min(m, self.ring)
        offsets = torch.arange(m - keep, m, device=self.next_pos.device)
        values = (self.next_pos[:, None] + offsets)[:, None, :]  # (B, 1, keep)
        fill, done = self._pending_from + m - keep, 0
        while done < keep:
            start = self.n_frozen + fill % self.ring
            run = min(keep - done, self.n_frozen + self.ring - start)
            self.pos[:, :, start : start + run] = values[..., done : done + run]
            fill, done = fill + run, done + run
        self.next_pos = self.next_pos + m

    def slot_validity(self) -> torch.Tensor:
        """(B, H_kv, S) validity of the slots the last update returned (positions untouched)."""
        if self._view is not None:
            return self._view[0]
        return self.valid[..., : self.view_n]

    def slot_view(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, H_kv, S) validity and original positions of the slots the last update returned."""
        self.flush_positions()
        if self._view is not None:
            return self._view
        return self.valid[..., : self.view_n], self.pos[..., : self.view_n]
