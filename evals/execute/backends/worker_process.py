"""A worker subprocess speaking JSON lines: one request object per line on its stdin, one reply object per line on
its stdout; everything it logs goes to its stderr, which is kept (the last lines) to quote when it dies.

Standard library only. The worker runs in its own session (its own process group), so a Ctrl-C of the harness
reaches the harness alone, which then shuts the worker down (:meth:`WorkerProcess.close`, also run at exit); the
worker ends itself, and its process group, when its stdin closes (the harness was killed)."""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import re
import signal
import subprocess
import threading
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)
TAIL_LINES = 400  # stderr lines kept: a root cause is logged well before the traceback that ends the worker
ERROR_LINE = re.compile(r"\b\w*(Error|Exception)\b")


class WorkerError(RuntimeError):
    """The worker died, or answered a request with ``{"error": ...}``."""


class WorkerProcess:
    """``argv`` started at construction (``env``: its whole environment; None: this process's), ``name`` in errors."""

    def __init__(self, argv: Sequence[str], name: str, env: dict[str, str] | None = None):
        self.name = name
        self.argv = list(argv)
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, text=True, bufsize=1,
                                         start_new_session=True)
        except OSError as exc:
            raise WorkerError(f"{name}: cannot start {self.argv[0]}: {exc.strerror or exc}") from None
        self._stderr = threading.Thread(target=self._drain, daemon=True)
        self._stderr.start()
        atexit.register(self.close)

    def _drain(self) -> None:
        """Keep the worker's last stderr lines (its log), each logged at DEBUG."""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            self.tail.append(line)
            log.debug("%s: %s", self.name, line)

    def stderr_tail(self, lines: int = 3) -> str:
        """What the worker last logged on stderr, on one line: its last ``lines`` lines that name an error (the
        root cause a traceback follows), else its last ``lines`` lines, joined by `` | ``."""
        if self.proc.poll() is not None:
            self._stderr.join(timeout=2)  # the process ended: let the reader take its last lines
        tail = [line.strip() for line in self.tail if line.strip()]
        errors = [line for line in tail if ERROR_LINE.search(line) and not line.startswith(("File ", "raise "))]
        picked = list(dict.fromkeys(errors))[-lines:] or tail[-lines:]
        return " | ".join(picked) or "(nothing on stderr)"

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request, wait for its reply; raises :class:`WorkerError` (the worker's own one-line error, or
        its exit status and last stderr lines when it died)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, ValueError):  # ValueError: the pipe was closed by close()
            line = ""
        if not line:
            code = self.proc.wait(timeout=30)
            raise WorkerError(f"{self.name}: the worker died (exit code {code}); its log: {self.stderr_tail()}")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            raise WorkerError(f"{self.name}: the worker answered a line that is not JSON: {line[:200]!r}") from None
        if "error" in reply:  # the worker's own line, and what it logged last (a root cause vLLM logs before)
            raise WorkerError(f"{self.name}: {reply['error']}; its log: {self.stderr_tail()}")
        return reply

    def close(self, wait_s: float = 20.0) -> None:
        """Ask the worker to stop, then end its whole process group (vLLM's engine processes too); idempotent."""
        atexit.unregister(self.close)
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "shutdown"}) + "\n")
                self.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                log.warning("%s: the worker did not stop within %.0f s: killing it", self.name, wait_s)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)  # its session's group: whatever it started and left behind
            except (ProcessLookupError, PermissionError):
                break
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                continue
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()
