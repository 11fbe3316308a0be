"""The engine's row storage class for a K/V format (:class:`~snapstream_core.policies.kv_format.KVFormat`): the
model's dtype (:class:`~.rows.RowCache`), FP8 (:class:`~.fp8_rows.Fp8RowCache`) or KIVI
(:class:`~.kivi_rows.KiviRowCache`). Each implements the same row interface (``empty``, ``update``, ``mark_written``,
``view``, ``load``, ``nbytes_per_row``, ``bytes_for``)."""

from __future__ import annotations

from snapstream_core.engine.rows import RowCache
from snapstream_core.policies.kv_format import KVFormat


def row_cache_class(fmt: KVFormat) -> type[RowCache]:
    """The row storage of ``fmt.kind``: ``auto``, ``fp8_e4m3`` or ``kivi``."""
    if fmt.kind == "fp8_e4m3":
        from snapstream_core.engine.fp8_rows import Fp8RowCache

        return Fp8RowCache
    if fmt.kind == "kivi":
        from snapstream_core.engine.kivi_rows import KiviRowCache

        return KiviRowCache
    if fmt.kind != "auto":
        raise ValueError(f"KVFormat.kind: must be auto, fp8_e4m3 or kivi, got {fmt.kind!r}")
    return RowCache
