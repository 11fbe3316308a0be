"""Watching one running sandbox: the phases of a run and the loop that serves it.

Every phase has a deadline measured here, outside the sandbox (:mod:`sandbox.clock`): startup (interpreter start:
wall clock), compile (the program's module code) and each test (from the driver's ``start`` message to its
``result``). The loop waits on three pipes at once: the driver's result channel (:mod:`sandbox.channel`), its
stdin, which gets the tests' inputs (:mod:`sandbox.feed`), and its stderr (:mod:`sandbox.stderr_tail`). The
parent keeps the expected outputs: ``on_result`` compares each test's report as it comes."""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from sandbox import cgroup
from sandbox.channel import ChannelError, ResultReader
from sandbox.cleanup import exit_reason
from sandbox.clock import Clock
from sandbox.feed import Feeder
from sandbox.limits import Limits, MiB
from sandbox.stderr_tail import StderrTail

OnResult = Callable[[int, dict], bool]
MAX_ERROR = 400  # characters kept of a compile or load error


@dataclass(frozen=True)
class RunResult:
    """How a run ended. ``status``: ``done`` (every test reported), ``stopped`` (the parent stopped at a failure),
    ``timeout``, ``crashed`` (the process died), ``compile_error``, ``load_error`` or ``protocol_error`` (the
    result channel was tampered with). ``phase``: ``startup``, ``compile`` or ``test``."""

    status: str
    phase: str
    test_index: int | None = None
    error: str | None = None
    elapsed_s: float = 0.0


class _Phases:
    """Where the run is (``phase``, the test running and the next one) and what each driver message does to it:
    the order the driver must keep (``ready`` → ``compiled`` → ``start``/``result`` per test → ``done``); any
    other message ends the run as ``protocol_error``."""

    def __init__(self, n_tests: int, timeout_s: float, clock: Clock, feeder: Feeder, on_result: OnResult,
                 start: float) -> None:
        self.n_tests, self.timeout_s, self.clock, self.feeder = n_tests, timeout_s, clock, feeder
        self.on_result, self.start = on_result, start
        self.phase, self.current, self.next_i = "startup", None, 0

    def end(self, status: str, error: str | None = None, index: int | None = None) -> RunResult:
        """The run's result, ending now in the current phase."""
        return RunResult(status, self.phase, index if index is not None else self.current, error,
                         time.monotonic() - self.start)

    def step(self, msg: dict, now: float) -> RunResult | None:
        """Take one message of the driver at ``now``; the run's result when it ends the run."""
        ev = msg["ev"]
        if ev == "ready" and self.phase == "startup":
            self.phase = "compile"
            self.clock.start(now, self.timeout_s)
        elif ev in ("compile_error", "load_error") and self.phase == "compile":
            return self.end(ev, str(msg.get("error", ""))[:MAX_ERROR])
        elif ev == "compiled" and self.phase == "compile":
            self.phase = "test"
            self.clock.start(now, self.timeout_s)
            self.feeder.feed(self.next_i)
        elif ev == "start" and self.phase == "test" and self.current is None and msg.get("i") == self.next_i:
            self.current = self.next_i
            self.clock.start(now, self.timeout_s)
        elif ev == "result" and self.phase == "test" and self.current is not None and msg.get("i") == self.current:
            self.current, self.next_i = None, self.next_i + 1
            self.clock.start(now, self.timeout_s)
            if not self.on_result(self.next_i - 1, msg):
                return self.end("stopped", index=self.next_i - 1)
            if self.next_i == self.n_tests:
                return self.end("done")
            self.feeder.feed(self.next_i)
        elif ev == "done" and (self.phase == "test" or self.n_tests == 0) and self.next_i == self.n_tests:
            return self.end("done")
        else:
            return self.end("protocol_error", f"unexpected message in phase {self.phase}")  # ev: the program's text
        return None


def monitor(proc: subprocess.Popen, inputs: list[str], n_public: int, limits: Limits, on_result: OnResult,
            start: float, unit: cgroup.Unit | None = None, errors: StderrTail | None = None) -> RunResult:
    """Serve the driver of ``proc`` until the run ends: read its result channel, feed it the tests' inputs
    (``inputs[:n_public]`` are public; the others only once every public test has its result), drain its stderr
    into ``errors``, and end the run at the first deadline missed (:class:`Clock`: ``limits.startup_s`` of wall
    time to start, then ``limits.timeout_s`` of the sandbox's own CPU time per phase). Every pipe is non-blocking:
    a driver that stops reading or writing cannot stall the deadlines."""
    reader = ResultReader(proc.stdout.fileno(), limits.max_output_mb * MiB)
    err_fd = proc.stderr.fileno() if errors is not None and proc.stderr is not None else None
    clock = Clock(proc.pid, unit)
    clock.start(start, limits.startup_s, cpu=False)
    with selectors.DefaultSelector() as sel:
        feeder = Feeder(proc.stdin.fileno(), inputs, n_public, sel)
        run = _Phases(len(inputs), limits.timeout_s, clock, feeder, on_result, start)
        sel.register(reader.fd, selectors.EVENT_READ)
        if err_fd is not None:
            os.set_blocking(err_fd, False)
            sel.register(err_fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if clock.expired(now):
                return run.end("timeout", f"no progress within the {run.phase} deadline")
            ready = {key.fd for key, _ in sel.select(clock.wait(now))}
            if feeder.pending and feeder.fd in ready:
                feeder.write()
            if err_fd is not None and err_fd in ready and not errors.read(err_fd):
                sel.unregister(err_fd)
                err_fd = None
            if reader.fd not in ready:
                continue
            got = reader.read()
            if got is None:
                continue
            if got == 0:
                return run.end("crashed", exit_reason(proc))
            try:
                for msg in reader.messages():
                    result = run.step(msg, time.monotonic())
                    if result is not None:
                        return result
            except ChannelError as exc:
                return run.end("protocol_error", str(exc))
