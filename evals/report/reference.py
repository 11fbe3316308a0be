"""Which run of a report is the full-cache reference: ``method=none`` stored in the model's dtype.

A run whose K/V are stored quantized (``compression.kv_dtype=fp8_e4m3``; KIVI, a method of its own) is never the
reference, whatever its method: the full cache in FP8 is a compressed run like any other, with its Δ against the
full cache in the model's dtype, its own label, point and row. A summary written before the storage knobs existed
has no ``kv_dtype`` column: its runs are in the model's dtype.
"""

from __future__ import annotations

import pandas as pd

AUTO = "auto"


def kv_dtype(frame: pd.DataFrame) -> pd.Series:
    """Each row's K/V storage dtype: ``auto`` where the column is missing or empty (the model's dtype)."""
    if "kv_dtype" not in frame.columns:
        return pd.Series(AUTO, index=frame.index, dtype=object)
    return frame["kv_dtype"].map(lambda v: AUTO if v is None or (isinstance(v, float) and pd.isna(v)) or v == ""
                                 else str(v))


def full_cache(frame: pd.DataFrame) -> pd.Series:
    """Bool per row: the run is the full cache in the model's dtype (the reference of every Δ)."""
    return (frame["method"] == "none") & (kv_dtype(frame) == AUTO)
