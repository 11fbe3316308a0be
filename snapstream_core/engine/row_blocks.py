"""Row blocks of the eager CPU step: how many rows one forward may hold so that a row's bits never depend on its
neighbours.

CPU matrix kernels (MKL's sgemm here) choose their blocking by the number of rows ``M`` of a product, and a row's
result can change bits with it: a row computed in a product of 4 rows and the same row in a product of 8 can differ
in the last bit. Which ``M`` agree depends on the processor and the matrix shape, not on the data (measured on one
AVX-512 Xeon: SmolLM2's shapes agree for every ``M`` in 4..15 and differ at 16; a 128 -> 64 product agrees only for
4 and 5). The engine therefore never assumes: :func:`row_block` tries every linear shape of the model on this
machine and returns the largest ``B`` for which every product of ``M`` rows, ``4 <= M <= B``, gives each row position
the bits it gets at the smallest ``M`` that holds it. The step then runs rows ``[0, hi)`` as forwards over the fixed
blocks ``[0, B), [B, 2B), ...``, each cut to the rows it needs but never below ``MIN_CPU_ROWS`` rows, so row ``r``
always sits at position ``r % B`` of a product whose size the probe checked.
"""

from __future__ import annotations

import torch

MIN_CPU_ROWS = 4  # CPU forwards of at least this many rows (1 to 3 rows take other kernels, other bits)


def linear_weights(model: torch.nn.Module) -> dict[tuple[int, int, torch.dtype], torch.Tensor]:
    """One weight (out, in) of each distinct ``(in_features, out_features, dtype)`` among the model's ``nn.Linear``
    modules (lm_head included)."""
    out: dict[tuple[int, int, torch.dtype], torch.Tensor] = {}
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            out.setdefault((m.in_features, m.out_features, m.weight.dtype), m.weight)
    return out


_BLOCKS: dict[tuple[int, int, torch.dtype, str, int], int] = {}


def _block_for(w: torch.Tensor, max_rows: int) -> int:
    """The largest ``B <= max_rows`` (at least ``MIN_CPU_ROWS``) whose products with ``w`` (out, in) of 4..B rows
    agree row by row. The kernels choose by shape, dtype and device, not by the values: the model's own weight is
    used (nothing allocated but the (max_rows, in) input), and the answer is kept per shape for the process."""
    key = (w.shape[1], w.shape[0], w.dtype, str(w.device), max_rows)
    if key not in _BLOCKS:
        _BLOCKS[key] = _probe(w, max_rows)
    return _BLOCKS[key]


def _probe(w: torch.Tensor, max_rows: int) -> int:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(max_rows, w.shape[1], generator=gen).to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        first = torch.nn.functional.linear(x[:MIN_CPU_ROWS], w)  # (4, out): positions 0..3 at M = 4
        seen = [first[p] for p in range(MIN_CPU_ROWS)]
        for m in range(MIN_CPU_ROWS + 1, max_rows + 1):
            out = torch.nn.functional.linear(x[:m], w)  # (m, out)
            if not all(torch.equal(out[p], seen[p]) for p in range(m - 1)):
                return m - 1
            seen.append(out[m - 1])  # position m - 1 first appears at M = m
    return max_rows


def row_block(model: torch.nn.Module, max_rows: int) -> int:
    """The rows one eager CPU forward may hold for ``model`` on this machine (see the module docstring), at most
    ``max_rows``; probed once per shape and process (a few hundred products with the model's own weights)."""
    if max_rows <= MIN_CPU_ROWS:
        return MIN_CPU_ROWS
    return min([_block_for(w, max_rows) for w in linear_weights(model).values()] or [max_rows])


def held_rows(rows: int, block: int) -> int:
    """Rows to allocate for ``rows`` samples so that every block of ``block`` rows can run at least
    ``MIN_CPU_ROWS`` of them: the last block is either whole or holds ``MIN_CPU_ROWS`` rows or more."""
    held = max(rows, MIN_CPU_ROWS)
    tail = held % block
    return held + (MIN_CPU_ROWS - tail) if 0 < tail < MIN_CPU_ROWS else held


def blocks(hi: int, held: int, block: int) -> list[tuple[int, int]]:
    """The forwards ``[(lo, end), ...]`` that cover rows ``[0, hi)``: the blocks ``[k * block, (k + 1) * block)``
    cut to ``hi`` but holding at least ``MIN_CPU_ROWS`` rows, never past ``held``."""
    out = []
    for lo in range(0, hi, block):
        end = min(lo + block, held, max(hi, lo + MIN_CPU_ROWS))
        out.append((lo, end))
    return out
