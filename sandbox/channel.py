"""Reading the driver's result channel (its stdout at start; the protocol is written in ``driver.py``): header lines
of flat JSON, each result's output or return value following its header as raw bytes of an announced size.

Linear in the bytes read (each byte is scanned for a newline once) and bounded: a header line longer than
:func:`line_limit`, an unreadable one or an announced size over the output cap is a :class:`ChannelError` (the run
ends as ``protocol_error``). Nothing here raises on what the program controls but :class:`ChannelError`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sandbox.limits import MiB

MAX_DEPTH = 16  # nesting a header line may have (the driver's are flat; values and outputs travel as raw bytes)
HEADER_LIMIT = 64 * 1024  # longest header line: an error message is at most 400 characters, 6 bytes each escaped
RAW_KEYS = {"stdout_bytes": "stdout", "value_bytes": "value_raw"}  # header field -> where the raw bytes go


def line_limit(max_output_bytes: int) -> int:
    """Longest result line accepted: a header (outputs and return values follow it as raw bytes of an announced
    size, at most ``max_output_bytes``). A longer line is a ``protocol_error``; parsing one costs a few MiB at most."""
    return HEADER_LIMIT


def _too_deep(value: Any, limit: int) -> bool:
    """Whether a parsed JSON value nests lists/dicts deeper than ``limit`` (iterative: never recurses; the sandbox
    imports nothing outside its package, so this is its own copy of ``tasks.base.too_deep``)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def parse_message(line: bytes) -> dict | None:
    """One result line as a dict with a string ``ev``, or None for anything else (bad JSON, UTF-8, depth, shape).
    Never raises: the line is written by a process the graded program controls."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError, MemoryError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    if not isinstance(msg, dict) or not isinstance(msg.get("ev"), str) or _too_deep(msg, MAX_DEPTH):
        return None
    return msg


class ChannelError(Exception):
    """The result channel broke the protocol; the message says how (it becomes the run's ``protocol_error``)."""


@dataclass
class _RawFrame:
    """A result whose raw bytes are being read: its header, the field that announced them, their buffer."""

    msg: dict
    key: str
    out: bytearray
    got: int = 0


class ResultReader:
    """The parent's end of the result channel (non-blocking): :meth:`read` takes what the pipe holds,
    :meth:`messages` hands out every message complete so far."""

    def __init__(self, fd: int, max_output: int) -> None:
        self.fd, self.max_output, self.max_line = fd, max_output, line_limit(max_output)
        self._buf = bytearray()
        self._scanned = 0  # buf[:scanned] holds no newline
        self._raw: _RawFrame | None = None
        os.set_blocking(fd, False)

    def read(self) -> int | None:
        """Read what the channel holds now: the number of bytes read (0: the channel is closed), or None when
        nothing was there. A result's raw bytes go straight into that result's own buffer (held once, never
        copied)."""
        try:
            if self._raw is not None:
                n = os.readv(self.fd, [memoryview(self._raw.out)[self._raw.got:]])
                self._raw.got += n
                return n
            chunk = os.read(self.fd, MiB)
        except BlockingIOError:
            return None
        self._buf += chunk
        return len(chunk)

    def messages(self) -> Iterator[dict]:
        """Each message complete now, in order, a result's raw bytes under ``stdout`` or ``value_raw``. Raises
        :class:`ChannelError` for an unreadable line, a bad output size, or an unfinished line over the limit."""
        while True:
            if self._raw is not None:
                raw = self._raw
                take = min(len(self._buf), len(raw.out) - raw.got)
                if take:
                    raw.out[raw.got:raw.got + take] = self._buf[:take]
                    del self._buf[:take]
                    raw.got += take
                if raw.got < len(raw.out):
                    break
                msg = raw.msg
                msg[RAW_KEYS[raw.key]] = raw.out
                self._raw, self._scanned = None, 0
            else:
                nl = self._buf.find(b"\n", self._scanned)
                if nl < 0:
                    break
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                self._scanned = 0
                parsed = parse_message(line)
                del line
                if parsed is None:
                    raise ChannelError("unreadable message on the result channel")
                msg = parsed
                key = next((k for k in RAW_KEYS if k in msg), None) if msg["ev"] == "result" else None
                if key is not None:
                    size = msg[key]
                    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= self.max_output:
                        raise ChannelError("bad output size on the result channel")
                    self._raw = _RawFrame(msg, key, bytearray(size))
                    continue
            yield msg
        self._scanned = len(self._buf)
        if len(self._buf) > self.max_line:
            raise ChannelError("result message too long")
