"""Names from run directories (model names, item ids) made safe where they become file names or markdown."""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def file_part(name: object) -> str:
    """``name`` as one file-name component: characters other than letters, digits, ``.``, ``_`` and ``-`` become
    ``_`` (``meta-llama/Llama-3.1-8B`` has a ``/``), with a short hash of the original when anything changed, so
    that two names never share a file."""
    text = str(name)
    safe = _UNSAFE.sub("_", text).strip(".") or "_"
    if safe == text:
        return safe
    return f"{safe[:80]}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def md_cell(value: object) -> object:
    """A table cell for markdown: ``|`` escaped and line breaks as spaces (a ``|`` in an item id split the row);
    non-strings unchanged."""
    if not isinstance(value, str):
        return value
    return value.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")
