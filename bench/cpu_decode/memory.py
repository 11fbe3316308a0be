"""Where the CPU tensors a decode step streams live: blocks of fresh anonymous memory on transparent huge pages.

A decode step reads every weight and every K/V entry it holds once, so on the CPU its speed is the speed at which
memory streams. Two things slow that down on Linux (what each costs a compiled SmolLM2 step: ``bench/README.md``):

- transformers loads CPU weights as private mappings of the safetensors file, 4 KiB page-cache pages, slower to
  stream than the same values copied into one block of anonymous memory;
- 4 KiB pages cost a TLB miss every 4 KiB and stop the hardware prefetcher at each page edge, which a block advised
  for transparent huge pages (``madvise(MADV_HUGEPAGE)``, the ``madvise`` mode most distributions ship) avoids, for
  the weights and the K/V slot buffers alike.

:func:`pack_parameters` moves a CPU model's parameters into one such block (values unchanged, in module order, so
that a layer's weights are read as one stream; ``bench.models.load`` calls it); :func:`cpu_zeros` gives zeroed
tensors carved from one block (the static decode cache's K/V, ``DecodeKernels.zeros`` of
:data:`bench.cpu_decode.KERNELS`). Elsewhere (no ``MAP_ANONYMOUS``, e.g. Windows) the blocks are ordinary
``torch.zeros`` memory; where the kernel has no ``MADV_HUGEPAGE`` or transparent huge pages are ``never``, ordinary
4 KiB pages.
"""

from __future__ import annotations

import logging
import math
import mmap

import torch

log = logging.getLogger(__name__)

HUGE_PAGE = 2 * 2**20  # bytes of an x86-64 / arm64 transparent huge page: the blocks start on this boundary
ALIGN = 64  # bytes: every tensor carved from a block starts on a cache line


def huge_pages() -> str:
    """The kernel's transparent huge page mode (``always``, ``madvise`` or ``never``; ``unknown`` off Linux): with
    ``always`` or ``madvise`` the blocks of this module get huge pages."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return "unknown"
    return text[text.find("[") + 1 : text.find("]")] if "[" in text else "unknown"


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def cpu_block(nbytes: int) -> torch.Tensor:
    """A (nbytes,) uint8 CPU tensor of fresh zeroed anonymous memory starting on a :data:`HUGE_PAGE` boundary,
    advised for transparent huge pages where the OS has them (blocks smaller than one huge page: ``torch.zeros``).
    The tensor keeps the mapping alive (views included)."""
    flags = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
    if None in flags or nbytes < HUGE_PAGE:  # smaller than one huge page: ordinary (64-byte aligned) memory
        return torch.zeros(max(nbytes, 0), dtype=torch.uint8)
    mapping = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=flags[0] | flags[1])
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mapping.madvise(mmap.MADV_HUGEPAGE)
        except OSError as exc:  # a kernel without transparent huge pages: 4 KiB pages, still one block
            log.debug("madvise(MADV_HUGEPAGE) refused (%s): ordinary pages", exc)
    whole = torch.frombuffer(mapping, dtype=torch.uint8)  # shares the mapping and holds a reference to it
    start = -whole.data_ptr() % HUGE_PAGE
    return whole[start : start + nbytes]


def _carve(block: torch.Tensor, offset: int, shape: torch.Size | tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    n = math.prod(shape) * dtype.itemsize
    return block[offset : offset + n].view(dtype).view(shape)


def cpu_zeros(shapes: list[tuple[int, ...]], dtype: torch.dtype) -> list[torch.Tensor]:
    """Zeroed contiguous CPU tensors of ``shapes`` and ``dtype``, carved in order from one :func:`cpu_block`."""
    sizes = [_aligned(math.prod(s) * dtype.itemsize) for s in shapes]
    block, out, offset = cpu_block(sum(sizes)), [], 0
    for shape, size in zip(shapes, sizes):
        out.append(_carve(block, offset, tuple(shape), dtype))
        offset += size
    return out


@torch.no_grad()
def pack_parameters(model: torch.nn.Module) -> int:
    """Move every CPU parameter of ``model`` (tied ones once) into one :func:`cpu_block`, in the order
    ``model.parameters()`` gives them (module order), each on a cache line; values, dtypes, shapes and the
    ``Parameter`` objects stay the same (``param.data`` is replaced). Returns the bytes moved (0: nothing on CPU).

    Each parameter's old storage is released as soon as it is copied, so the memory held peaks near one model plus
    its largest parameter. Call it after the last ``model.to(...)``: moving the model again leaves the block."""
    params = [p for p in dict.fromkeys(model.parameters()) if p.device.type == "cpu" and p.numel() > 0]
    sizes = [_aligned(p.numel() * p.element_size()) for p in params]
    if not params:
        return 0
    block, offset = cpu_block(sum(sizes)), 0
    for p, size in zip(params, sizes):
        view = _carve(block, offset, p.shape, p.dtype)
        view.copy_(p.data)
        p.data = view
        offset += size
    return offset
