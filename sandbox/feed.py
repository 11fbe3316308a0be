"""Feeding the tests' inputs to the driver's stdin: one test ahead, and a hidden test's input only once every public
test has its result (a hidden input is never inside the sandbox while a public test runs). Writes never block: a
driver that stops reading cannot stall the deadlines."""

from __future__ import annotations

import os
import selectors

CHUNK = 1 << 20  # bytes offered to the pipe per write


def input_frame(i: int, text: str) -> bytes:
    """Test ``i``'s input as the driver's inbox reads it: ``"i n\\n"`` then ``n`` bytes of UTF-8 (lone surrogates
    kept)."""
    data = text.encode("utf-8", "surrogatepass")
    return b"%d %d\n" % (i, len(data)) + data


class Feeder:
    """The inputs of one run and the stdin pipe they go to (non-blocking); ``sel`` waits for the pipe only while
    input is pending."""

    def __init__(self, fd: int, inputs: list[str], n_public: int, sel: selectors.BaseSelector) -> None:
        self.fd, self.inputs, self.n_public, self.sel = fd, inputs, n_public, sel
        self.pending = memoryview(b"")  # the rest of the input being sent
        self.sent = 0  # inputs queued for the driver so far
        os.set_blocking(fd, False)

    def feed(self, next_i: int) -> None:
        """Send the inputs the driver may hold while test ``next_i`` is next: those of that test and the one after
        it (so that it never waits for us between tests), but a hidden test's input only once every public test has
        its result."""
        n_tests = len(self.inputs)
        while self.sent < n_tests and self.sent <= next_i + 1 and (self.sent < self.n_public or
                                                                     next_i >= self.n_public):
            frame = input_frame(self.sent, self.inputs[self.sent])
            self.pending = memoryview(bytes(self.pending) + frame) if self.pending else memoryview(frame)
            self.sent += 1
        self.write()

    def write(self) -> None:
        """Write what the pipe takes of the pending input now; wait for the pipe (select) only for the rest."""
        try:
            while self.pending:
                self.pending = self.pending[os.write(self.fd, self.pending[:CHUNK]):]
        except BlockingIOError:
            pass
        except OSError:  # the driver closed its end: it ends, and its end is reported by the result channel
            self.pending = memoryview(b"")
        waiting = self.fd in self.sel.get_map()
        if self.pending and not waiting:
            self.sel.register(self.fd, selectors.EVENT_WRITE)
        elif not self.pending and waiting:
            self.sel.unregister(self.fd)
