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


_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _inline(text: str, special: str) -> str:
    """``text`` on one line (CR and LF as spaces), HTML's ``& < >`` as entities (no tag, comment or autolink of a
    name reaches a renderer) and each character of ``special`` escaped with a backslash."""
    out = []
    line = text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
    for i, ch in enumerate(line):
        if ch in _HTML:
            out.append(_HTML[ch])
        elif ch == "_" and 0 < i < len(line) - 1 and line[i - 1].isalnum() and line[i + 1].isalnum():
            out.append(ch)  # inside a word (smollm2_135m) "_" never emphasises (CommonMark): left as written
        elif ch == "\\" or ch in special:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def md_cell(value: object) -> object:
    """A table cell for markdown: ``|`` escaped and line breaks as spaces (a ``|`` in an item id split the row),
    HTML's ``& < >`` as entities, and a link's ``](`` and a code span's backtick escaped (a model named
    ``[x](http://...)`` is text, not a link); non-strings unchanged."""
    if not isinstance(value, str):
        return value
    return _inline(value, "|`").replace("](", "]\\(")


# markdown's control characters within a line (a link needs "[" and "]", emphasis "*" or "_")
MD_SPECIAL = "\\`*_[]#|!~"


def md_text(value: object) -> str:
    """Text for a markdown heading, list item or image caption: one line, HTML's ``& < >`` as entities, and every
    markdown control character (``# * _ ` [ ] | ! ~``) escaped, so that a model, task, method or run name
    that holds them (a newline and ``<script>`` in a model name) is shown as written and never becomes markup."""
    return _inline(str(value), MD_SPECIAL)
