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

import functools

import torch

MIN_CPU_ROWS = 4  # CPU forwards of at least this many rows (1 to 3 rows take other kernels, other bits)


def linear_shapes(model: torch.nn.Module) -> tuple[tuple[int, int, torch.dtype], ...]:
    """The distinct ``(in_features, out_features, dtype)`` of the model's ``nn.Linear`` modules (lm_head included)."""
    shapes = {(m.in_features, m.out_features, m.weight.dtype) for m in model.modules()
              if isinstance(m, torch.nn.Linear)}
    return tuple(sorted(shapes, key=lambda s: (s[0], s[1], str(s[2]))))


@functools.lru_cache(maxsize=32)
def _block_for(shape: tuple[int, int, torch.dtype], max_rows: int) -> int:
    """The largest ``B <= max_rows`` (at least ``MIN_CPU_ROWS``) whose products of 4..B rows agree row by row."""
    k, n, dtype = shape
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=gen).to(dtype)
    x = torch.randn(max_rows, k, generator=gen).to(dtype)
    with torch.no_grad():
        first = torch.nn.functional.linear(x[:MIN_CPU_ROWS], w)  # (4, n): positions 0..3 at M = 4
        seen = [first[p] for p in range(MIN_CPU_ROWS)]
        for m in range(MIN_CPU_ROWS + 1, max_rows + 1):
            out = torch.nn.functional.linear(x[:m], w)  # (m, n)
            if not all(torch.equal(out[p], seen[p]) for p in range(m - 1)):
                return m - 1
            seen.append(out[m - 1])  # position m - 1 first appears at M = m
    return max_rows


def row_block(model: torch.nn.Module, max_rows: int) -> int:
    """The rows one eager CPU forward may hold for ``model`` on this machine (see the module docstring), at most
    ``max_rows``; probed once per shape and process (a few hundred products of random data)."""
    if max_rows <= MIN_CPU_ROWS:
        return MIN_CPU_ROWS
    return min([_block_for(s, max_rows) for s in linear_shapes(model)] or [max_rows])


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
