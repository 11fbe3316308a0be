"""Math-Verify off the main thread: a child process that grades in its own main thread.

Math-Verify bounds parsing and comparison with ``signal.alarm``, which Python only allows in the main thread; called
from a worker thread it raises. Turning its timeouts off is no answer (``\\boxed{9^{9^{9}}}`` then keeps sympy busy
for a very long time), so a grader called off the main thread sends the comparison to a child process
(``python -c "from tasks.aime24.verify_worker import main; main()"``). It reads JSON lines
``[gold, text, timeout_s, mode, version]`` on stdin (:func:`tasks.aime24.compare.compare`: mode ``boxed`` on a boxed
answer, ``lighteval`` on a whole answer text under a grader version) and answers
``[prediction_key, correct]``, Math-Verify's alarms working in its
main thread. The parent waits at most ``3 * timeout_s + 60`` seconds per answer, then kills the child (a fresh one
starts on the next call).

A plain subprocess, not ``multiprocessing``: spawn/forkserver re-import the parent's ``__main__``, which re-runs a
user's unguarded script inside the child.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

from tasks.aime24.compare import compare
from tasks.aime24.lighteval_metric import DEFAULT_GRADER_VERSION

log = logging.getLogger(__name__)

_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the ``tasks`` package


class VerifyWorker:
    """One long-lived child, one request at a time (callers queue on a lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._cleanup_registered = False

    def ask(self, gold: str, boxed: str, timeout_s: int, mode: str = "boxed",
            version: str = DEFAULT_GRADER_VERSION) -> tuple[str | None, bool] | None:
        """The child's verdict, or None when it failed or did not answer in time."""
        with self._lock:
            try:
                proc = self._running()
                if proc.stdin is None or proc.stdout is None:
                    raise OSError("math-verify child has no pipes")
                proc.stdin.write(json.dumps([gold, boxed, timeout_s, mode, version]) + "\n")
                proc.stdin.flush()
                ready, _, _ = select.select([proc.stdout], [], [], 3 * timeout_s + 60)
                line = proc.stdout.readline() if ready else ""
                if not line:
                    log.warning("math-verify child gave no answer on %.80r; counted wrong", boxed)
                    self._stop()
                    return None
                key, correct = json.loads(line)
                return (None if key is None else str(key)), bool(correct)
            except Exception:  # noqa: BLE001 - a broken child is a wrong answer, never a crash
                log.warning("math-verify child failed on %.80r; counted wrong", boxed, exc_info=True)
                self._stop()
                return None

    def close(self) -> None:
        with self._lock:
            self._stop()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _running(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            if not self._cleanup_registered:
                atexit.register(self.close)
                self._cleanup_registered = True
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")])))
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "from tasks.aime24.verify_worker import main; main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8", env=env,
            )
        return self._proc

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    stream.close()
            self._proc = None


WORKER = VerifyWorker()  # starts its child on first use


def main() -> None:
    """The child's loop: one JSON request per line in, one verdict per line out."""
    replies, sys.stdout = sys.stdout, sys.stderr  # stray prints must not corrupt the reply stream
    for line in sys.stdin:
        gold, text, timeout_s, mode, version = json.loads(line)
        key, correct = compare(mode, gold, text, int(timeout_s), version)
        replies.write(json.dumps([key, correct]) + "\n")
        replies.flush()

