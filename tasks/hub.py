"""Whether the Hugging Face hub may be asked, decided once per process before any hub read.

``huggingface_hub`` retries a failed request five times with backoff (about 25 s per file) and ``datasets`` then
logs each retry; with no network a job would hang that long per file before failing. Instead, the first hub read of
a job calls :func:`offline_reason`: ``HF_HUB_OFFLINE`` set, or one ``HEAD`` of the endpoint (``HF_ENDPOINT``) with a
short timeout and no retry that fails, means that the hub is not asked at all and only the local caches are read
(``local_files_only=True``, or :func:`datasets_cache_only` for ``datasets.load_dataset``). A source found in neither
is one ``ValueError("<field>: ...")`` naming the knob. Nothing here runs at import.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path

PROBE_TIMEOUT_S = 5.0  # one connection attempt; a live hub answers a HEAD in well under a second


def offline_env() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``, as huggingface_hub reads it) is set to a true value."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def offline_reason() -> str | None:
    """``None`` when the hub answers; otherwise why it is not asked (``HF_HUB_OFFLINE is set``, or the probe's
    failure and the endpoint), for the one-line error."""
    if offline_env():
        return "HF_HUB_OFFLINE is set"
    return _probe()


@functools.lru_cache(maxsize=1)  # a job asks once, whatever number of files it reads
def _probe() -> str | None:
    from huggingface_hub import constants, get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=PROBE_TIMEOUT_S)  # any HTTP answer, even an error, is "up"
    except Exception as exc:  # noqa: BLE001 - DNS, refused, timeout, proxy: all mean the hub cannot be reached
        return f"{type(exc).__name__} at {constants.ENDPOINT}"
    return None


@contextlib.contextmanager
def datasets_cache_only() -> Iterator[None]:
    """For the block, ``datasets.load_dataset`` reads its local cache and sends no request (its own offline flag,
    restored after; the environment is left alone)."""
    from datasets import config

    before = config.HF_HUB_OFFLINE
    config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        config.HF_HUB_OFFLINE = before


def load_hub_dataset(hub_id: str, split: str, revision: str | None):
    """``datasets.load_dataset(hub_id, split=split, revision=revision)``, from the local cache alone when the hub
    is not to be asked. Raises ``ValueError("task.source: ...")`` when the hub is unreachable and nothing is cached,
    ``ValueError("task.hub_id: ...")`` for any other failure."""
    from datasets import load_dataset  # local: importing datasets is slow and only the hub source needs it

    reason = None if Path(hub_id).is_dir() else offline_reason()  # a local folder laid out like the repo: no hub
    if reason is not None:
        try:
            with datasets_cache_only():
                return load_dataset(hub_id, split=split, revision=revision)
        except Exception:  # noqa: BLE001 - not cached (or a broken cache): the hub was the only other place
            raise ValueError(unreachable_data(hub_id, reason)) from None
    try:
        return load_dataset(hub_id, split=split, revision=revision)
    except Exception as exc:  # noqa: BLE001 - auth, missing split or revision: one clear message
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"task.hub_id: cannot load {hub_id} (split {split}, revision {revision}): {first}") from None


def unreachable_data(what: str, reason: str) -> str:
    """The one line for a hub data source that can be neither downloaded nor read from the cache."""
    return (f"task.source: hub dataset {what} unreachable ({reason}) and not in the local cache; "
            "set task.path=FILE (a local export) or task.source=bundled (the small bundled sample)")
