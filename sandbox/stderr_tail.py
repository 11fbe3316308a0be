"""The last bytes a sandbox wrote to its stderr: a pipe, never a host file, read as it comes (so a program never
waits on it) and kept only as a tail; nothing of it reaches the verdict, as with the official runner. It explains a
sandbox that did not start."""

from __future__ import annotations

import os

from sandbox.limits import MiB

STDERR_TAIL = 64 * 1024


class StderrTail:
    """The last :data:`STDERR_TAIL` bytes (at most twice that between trims) of a sandbox's stderr."""

    def __init__(self) -> None:
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        """Keep ``chunk``, dropping the oldest bytes past the tail."""
        self.data += chunk
        if len(self.data) > 2 * STDERR_TAIL:
            del self.data[:-STDERR_TAIL]

    def read(self, fd: int) -> bool:
        """Read what the sandbox wrote to stderr (``fd``, non-blocking); False once the pipe is closed."""
        try:
            chunk = os.read(fd, MiB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        self.add(chunk)
        return bool(chunk)

    def drain(self, fd: int, most: int = 4 * MiB) -> None:
        """Read what is left (the sandbox is gone: the pipe ends soon), at most ``most`` bytes."""
        os.set_blocking(fd, False)
        while most > 0:
            try:
                chunk = os.read(fd, MiB)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                return
            self.add(chunk)
            most -= len(chunk)
