"""Run one graded program in its sandbox: write the job, launch the driver, stream its results, enforce deadlines,
kill everything it started and remove its temporary directory.

The parent keeps the expected outputs and sends the tests' inputs on the driver's stdin one test ahead, a hidden
test's input only once every public test has its result (a hidden input is never inside the sandbox while a public
test runs); the driver only reports what the program produced (see ``driver.py``). Every
phase has a deadline measured here, outside the sandbox: startup (interpreter start: wall clock), compile (the
program's module code) and each test (from the driver's ``start`` message to its ``result``): ``timeout_s`` of the
sandbox's own CPU time, summed over every process in it (its cgroup's clock, children the kernel reaped included;
see :mod:`tasks.livecodebench.cgroup`), so that samples graded together cannot push each other into a timeout, with
:data:`WALL_FACTOR` times as much wall time for a program that sleeps or waits. Past a deadline the whole sandbox is
killed. The sandbox's stderr is a pipe (never a host file): its last bytes explain a sandbox that did not start."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tasks.base import too_deep
from tasks.livecodebench import cgroup, seccomp
from tasks.livecodebench.isolation import (
    PROCESS_VIEW,
    WORK_DIR,
    Isolation,
    bwrap_argv,
    interpreter_sys_path,
    process_argv,
    process_settings,
    release_uid,
    sandbox_env,
)

log = logging.getLogger(__name__)

MiB = 1 << 20


LIMIT_RANGES = {  # knob: (lowest, highest) accepted; the upper bounds keep every derived cap (CPU rlimit, the size
    "timeout_s": (0.01, 600.0),  # of the private /tmp, the result line) a real number on a real machine
    "memory_mb": (256, 1 << 20),  # the interpreter needs 256 MB; 1 TiB
    "max_output_mb": (1, 1024),
    "nofile": (16, 65536),
    "nproc": (1, 4096),
    "startup_s": (1.0, 600.0),
}


@dataclass(frozen=True)
class Limits:
    """Per-program limits. ``timeout_s`` is per test (LiveCodeBench: 6 s); ``memory_mb`` is the address-space
    rlimit of each process and, where the sandbox has a cgroup, the bound of the whole sandbox; ``nproc`` likewise
    (plus the sandbox's own few tasks)."""

    timeout_s: float = 6.0
    memory_mb: int = 4096
    max_output_mb: int = 16
    nofile: int = 256
    nproc: int = 64
    startup_s: float = 60.0

    def __post_init__(self) -> None:
        for name, (low, high) in LIMIT_RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not low <= value <= high:
                raise ValueError(f"task.{name}: must be a finite number in [{low}, {high}], got {value!r}")

    def rlimits(self, n_tests: int) -> dict[str, int]:
        return {"cpu_s": int((n_tests + 1) * self.timeout_s) + 2, "as_bytes": self.memory_mb * MiB,
                "fsize_bytes": self.max_output_mb * MiB, "nofile": self.nofile, "nproc": self.nproc}


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


class SandboxError(RuntimeError):
    """The sandbox itself failed before the program ran (not the program's fault)."""


@functools.lru_cache(maxsize=1)
def _driver_source() -> str:
    return Path(__file__).with_name("driver.py").read_text(encoding="utf-8")


OnResult = Callable[[int, dict], bool]


def execute(iso: Isolation, kind: str, code: str, func_name: str | None, inputs: list[str], limits: Limits,
            on_result: OnResult, hidden: tuple[str, ...] = (), protocol: str = "lcb_runner",
            n_public: int = 0) -> RunResult:
    """Run ``code`` on ``inputs`` in one sandboxed interpreter. ``on_result(i, message)`` sees each test's report
    in order and returns False to stop there. ``protocol``: the program's I/O semantics (see ``driver.py``).
    ``inputs[:n_public]`` are public (shown in the prompt): the others reach the sandbox only after every public
    test has its result.
    Raises :class:`SandboxError` when the sandbox cannot start."""
    root = tempfile.mkdtemp(prefix="lcb-")
    uid, unit = None, None
    try:
        uid = iso.new_uid()
        os.chmod(root, 0o711)
        job_dir = os.path.join(root, "job")
        os.mkdir(job_dir, 0o700)
        max_out = limits.max_output_mb * MiB
        job = {"kind": kind, "code": code, "func_name": func_name, "n_tests": len(inputs), "uid": uid,
               "protocol": protocol,
               "limits": limits.rlimits(len(inputs)), "max_output_bytes": max_out,
               "sys_path": interpreter_sys_path(iso.python),
               "nproc_relative": iso.mode == "process" and uid is None and os.geteuid() != 0}
        Path(job_dir, "driver.py").write_text(_driver_source(), encoding="utf-8")
        Path(job_dir, "blank").touch()
        os.chmod(os.path.join(job_dir, "blank"), 0o644)
        with open(os.path.join(job_dir, "job.json"), "w", encoding="utf-8") as fh:
            json.dump(job, fh)
        biggest = max((len(x) for x in inputs), default=0)
        tmp_bytes = 2 * max_out + 4 * biggest + 64 * MiB  # everything the program may write, in total
        unit = cgroup.make_unit(limits.memory_mb * MiB, limits.nproc + cgroup.PIDS_OVERHEAD)
        pass_fds: list[int] = []
        if iso.mode == "bwrap":
            bpf = seccomp.filter_bytes()
            if bpf:
                Path(root, "seccomp.bpf").write_bytes(bpf)
                pass_fds.append(os.open(os.path.join(root, "seccomp.bpf"), os.O_RDONLY))
            options, command = bwrap_argv(iso, job_dir, tmp_bytes, hidden, pass_fds[0] if pass_fds else None)
            Path(root, "bwrap.args").write_bytes(b"".join(a.encode() + b"\0" for a in options))
            pass_fds.append(os.open(os.path.join(root, "bwrap.args"), os.O_RDONLY))  # not in /proc/1/cmdline
            argv = [command[0], "--args", str(pass_fds[-1]), *command[1:]]
            cwd, env = root, sandbox_env(WORK_DIR, "/tmp")
        else:
            Path(root, "launch.json").write_bytes(process_settings(iso, job_dir, tmp_bytes, uid, hidden))
            pass_fds.append(os.open(os.path.join(root, "launch.json"), os.O_RDONLY))
            argv = process_argv(iso, pass_fds[-1])
            cwd, env = root, sandbox_env(f"{PROCESS_VIEW}/work", "/tmp")
        try:
            proc = subprocess.Popen([*cgroup.entry_prefix(unit), *argv], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                    close_fds=True, pass_fds=tuple(pass_fds))
        finally:
            for fd in pass_fds:
                os.close(fd)
        start = time.monotonic()
        errors = _Tail()
        try:
            result = _monitor(proc, inputs, n_public, limits, on_result, start, unit, errors)
            if result.phase == "startup" and not proc.stderr.closed:
                errors.drain(proc.stderr.fileno())
        finally:
            _terminate(proc, iso, uid, unit)
        if result.phase == "startup":
            tail = errors.data[-2000:].decode("utf-8", "replace").strip()
            raise SandboxError(f"the {iso.mode} sandbox did not start ({result.status}): {tail or result.error}")
        return result
    finally:
        if unit is not None:
            unit.remove()
        release_uid(uid)
        _remove(root)


class _Tail:
    """The last :data:`STDERR_TAIL` bytes a sandbox wrote to its stderr (a pipe: nothing of it reaches a host file or
    the verdict, as with the official runner; read as it comes, so a program never waits on it, and only the tail is
    kept)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * STDERR_TAIL:
            del self.data[:-STDERR_TAIL]

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


STDERR_TAIL = 64 * 1024


PROBE_CODE = """import os, tempfile
status = dict(line.split(':', 1) for line in open('/proc/self/status') if ':' in line)
caps = {k: int(status[k], 16) for k in ('CapEff', 'CapPrm', 'CapBnd', 'CapAmb')}
with tempfile.TemporaryFile() as fh:
    fh.write(b'probe')
held = [k for k, v in caps.items() if v] + ([] if status['NoNewPrivs'].strip() == '1' else ['no_new_privs off'])
print('ok' if not held else 'privileged: ' + ' '.join(held))
"""


def probe(iso: Isolation) -> str:
    """Run a program that checks its own privileges (no capability in any set, ``no_new_privs``) and writes a
    temporary file; return "" when the sandbox works so, else the reason it does not (one line)."""
    seen: list[str] = []

    def on_result(i: int, msg: dict) -> bool:
        out = msg.get("stdout")
        text = bytes(out).decode("utf-8", "replace") if isinstance(out, (bytes, bytearray)) else msg.get("error")
        seen.append(str(text).strip()[:200])
        return True

    try:
        result = execute(iso, "stdin", PROBE_CODE, None, ["\n"], Limits(), on_result, protocol="strict")
    except (SandboxError, OSError, subprocess.SubprocessError) as exc:
        return " ".join(str(exc).split())
    if result.status != "done":
        return " ".join(f"probe ended with {result.status}: {result.error}".split())
    return "" if seen == ["ok"] else f"probe program: {' '.join(seen)}"


MAX_DEPTH = 16  # nesting a header line may have (the driver's are flat; values and outputs travel as raw bytes)
HEADER_LIMIT = 64 * 1024  # longest header line: an error message is at most 400 characters, 6 bytes each escaped


def line_limit(max_output_bytes: int) -> int:
    """Longest result line accepted: a header (outputs and return values follow it as raw bytes of an announced
    size, at most ``max_output_bytes``). A longer line is a ``protocol_error``; parsing one costs a few MiB at most."""
    return HEADER_LIMIT


def input_frame(i: int, text: str) -> bytes:
    """Test ``i``'s input as the driver's inbox reads it: ``"i n\\n"`` then ``n`` bytes of UTF-8 (lone surrogates
    kept)."""
    data = text.encode("utf-8", "surrogatepass")
    return b"%d %d\n" % (i, len(data)) + data


RAW_KEYS = {"stdout_bytes": "stdout", "value_bytes": "value_raw"}  # header field -> where the raw bytes go


def parse_message(line: bytes) -> dict | None:
    """One result line as a dict with a string ``ev``, or None for anything else (bad JSON, UTF-8, depth, shape).
    Never raises: the line is written by a process the graded program controls."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError, MemoryError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    if not isinstance(msg, dict) or not isinstance(msg.get("ev"), str) or too_deep(msg, MAX_DEPTH):
        return None
    return msg


WALL_FACTOR = 3.0  # a phase may take this many times its CPU budget in wall time (+1 s): a program that sleeps
CPU_POLL_S = 0.05  # how often the sandbox's CPU clock is read


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (children of each of their threads), from ``/proc``."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def _tree_cpu(root: int) -> float:
    """CPU seconds used so far by ``root`` and every process below it (user + system, with the children each has
    reaped): the sandbox's own clock. Everything a program starts stays below its sandbox's root (a PID namespace
    whose init reaps), so ``setsid`` and double forks are counted; another sample's processes never are."""
    total = 0
    for pid in _tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        except (OSError, ValueError, IndexError):
            continue
    return total / _CLK_TCK


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _Clock:
    """The budget of the current phase: ``budget`` CPU seconds on the sandbox's own clock (its cgroup's, else
    :func:`_tree_cpu`; other samples' load cannot use it up), and :data:`WALL_FACTOR` times as much wall time for a
    program that waits."""

    def __init__(self, pid: int, unit: cgroup.Unit | None = None) -> None:
        self.pid, self.unit, self.used = pid, unit, 0.0

    def start(self, now: float, budget: float, cpu: bool = True) -> None:
        self.budget, self.cpu = budget, cpu
        self.wall_deadline = now + (budget * WALL_FACTOR + 1.0 if cpu else budget)
        self.cpu_start = self.read() if cpu else 0.0

    def read(self) -> float:
        now = self.unit.cpu_s() if self.unit is not None else _tree_cpu(self.pid)
        self.used = max(self.used, now)  # a process reaped between reads moves, never vanishes
        return self.used

    def expired(self, now: float) -> bool:
        return now >= self.wall_deadline or (self.cpu and self.read() - self.cpu_start > self.budget)

    def wait(self, now: float) -> float:
        return max(0.0, min(self.wall_deadline - now, CPU_POLL_S if self.cpu else 1.0))


def _monitor(proc: subprocess.Popen, inputs: list[str], n_public: int, limits: Limits, on_result: OnResult,
             start: float, unit: cgroup.Unit | None = None, errors: _Tail | None = None) -> RunResult:
    """Stream the driver's result lines and feed it the tests' inputs (:func:`feed`; non-blocking: a driver that
    stops reading cannot stall the deadlines), and drain its stderr pipe into ``errors``. Linear in the bytes read
    (each byte is scanned for a newline once), and bounded: a line longer than :func:`line_limit` ends the run as
    ``protocol_error``. Each phase after startup has ``timeout_s`` of the sandbox's own CPU time (see
    :class:`_Clock`)."""
    n_tests = len(inputs)
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    in_fd = proc.stdin.fileno()
    os.set_blocking(in_fd, False)
    pending = memoryview(b"")  # the rest of the input being sent
    max_output = limits.max_output_mb * MiB
    max_line = line_limit(max_output)
    phase, current, next_i = "startup", None, 0
    clock = _Clock(proc.pid, unit)
    err_fd = proc.stderr.fileno() if errors is not None and proc.stderr is not None else None
    clock.start(start, limits.startup_s, cpu=False)
    buf = bytearray()
    scanned = 0  # buf[:scanned] holds no newline
    raw: tuple[dict, bytearray, int] | None = None  # a stdin result whose output bytes are being read: (msg, out, got)

    def end(status: str, error: str | None = None, index: int | None = None) -> RunResult:
        return RunResult(status, phase, index if index is not None else current, error, time.monotonic() - start)

    sent = 0  # inputs queued for the driver so far

    def write() -> None:
        """Write what the pipe takes of the pending input now; wait for the pipe (select) only for the rest."""
        nonlocal pending
        try:
            while pending:
                pending = pending[os.write(in_fd, pending[:1 << 20]):]
        except BlockingIOError:
            pass
        except OSError:  # the driver closed its end: it ends, and its end is reported by the result channel
            pending = memoryview(b"")
        waiting = in_fd in sel.get_map()
        if pending and not waiting:
            sel.register(in_fd, selectors.EVENT_WRITE)
        elif not pending and waiting:
            sel.unregister(in_fd)

    def feed() -> None:
        """Send the inputs the driver may hold now: those of the running test and the next one (so that it never
        waits for us between tests), but a hidden test's input only once every public test has its result."""
        nonlocal pending, sent
        while sent < n_tests and sent <= next_i + 1 and (sent < n_public or next_i >= n_public):
            frame = input_frame(sent, inputs[sent])
            pending = memoryview(bytes(pending) + frame) if pending else memoryview(frame)
            sent += 1
        write()

    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        if err_fd is not None:
            os.set_blocking(err_fd, False)
            sel.register(err_fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if clock.expired(now):
                return end("timeout", f"no progress within the {phase} deadline")
            ready = sel.select(clock.wait(now))
            if pending and any(key.fd == in_fd for key, _ in ready):
                write()
            if err_fd is not None and any(key.fd == err_fd for key, _ in ready):
                if not _read_stderr(err_fd, errors):
                    sel.unregister(err_fd)
                    err_fd = None
            if not any(key.fd == fd for key, _ in ready):
                continue
            try:
                if raw is not None:  # straight into the output's own buffer: held once, never copied
                    n = os.readv(fd, [memoryview(raw[1])[raw[2]:]])
                    chunk = b"" if n == 0 else None
                    raw = (raw[0], raw[1], raw[2] + n)
                else:
                    chunk = os.read(fd, MiB)
            except BlockingIOError:
                continue
            if chunk is not None and not chunk:
                return end("crashed", _exit_reason(proc))
            if chunk:
                buf += chunk
            while True:
                if raw is not None:
                    msg, out, got = raw
                    take = min(len(buf), len(out) - got)
                    if take:
                        out[got:got + take] = buf[:take]
                        del buf[:take]
                        got += take
                        raw = (msg, out, got)
                    if got < len(out):
                        break
                    msg[RAW_KEYS[msg["raw_key"]]], raw, scanned = out, None, 0
                    del msg["raw_key"]
                else:
                    nl = buf.find(b"\n", scanned)
                    if nl < 0:
                        break
                    line = bytes(buf[:nl])
                    del buf[: nl + 1]
                    scanned = 0
                    msg = parse_message(line)
                    del line
                    if msg is None:
                        return end("protocol_error", "unreadable message on the result channel")
                    key = next((k for k in RAW_KEYS if k in msg), None) if msg["ev"] == "result" else None
                    if key is not None:
                        size = msg[key]
                        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= max_output:
                            return end("protocol_error", "bad output size on the result channel")
                        msg["raw_key"] = key
                        raw = (msg, bytearray(size), 0)
                        continue
                ev = msg["ev"]
                now = time.monotonic()
                if ev == "ready" and phase == "startup":
                    phase = "compile"
                    clock.start(now, limits.timeout_s)
                elif ev in ("compile_error", "load_error") and phase == "compile":
                    return end(ev, str(msg.get("error", ""))[:400])
                elif ev == "compiled" and phase == "compile":
                    phase = "test"
                    clock.start(now, limits.timeout_s)
                    feed()
                elif ev == "start" and phase == "test" and current is None and msg.get("i") == next_i:
                    current = next_i
                    clock.start(now, limits.timeout_s)
                elif ev == "result" and phase == "test" and current is not None and msg.get("i") == current:
                    current, next_i = None, next_i + 1
                    clock.start(now, limits.timeout_s)
                    if not on_result(next_i - 1, msg):
                        return end("stopped", index=next_i - 1)
                    if next_i == n_tests:
                        return end("done")
                    feed()
                elif ev == "done" and (phase == "test" or n_tests == 0) and next_i == n_tests:
                    return end("done")
                else:
                    return end("protocol_error", f"unexpected message in phase {phase}")  # ev: the program's text
            scanned = len(buf)
            if len(buf) > max_line:
                return end("protocol_error", "result message too long")


def _read_stderr(fd: int, errors: _Tail) -> bool:
    """Read what the sandbox wrote to stderr into ``errors``; False once the pipe is closed."""
    try:
        chunk = os.read(fd, MiB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    errors.add(chunk)
    return bool(chunk)


def _exit_reason(proc: subprocess.Popen) -> str:
    try:
        code = proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        return "the program closed the result channel"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code > 128:  # process mode: its PID 1 passes on a signal that killed the driver as 128 + the signal
        try:
            return f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    return f"exited with status {code} before reporting"


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _terminate(proc: subprocess.Popen, iso: Isolation, uid: int | None, unit: cgroup.Unit | None = None) -> None:
    """Kill whatever the run left. With a cgroup: every task in it. bwrap: killing its PID-namespace init takes
    every process inside with it, and bwrap exits only once they are gone. process: the process group (its PID 1
    with it: the kernel then kills the rest of the namespace), then every process of the fresh uid. Returns once
    every process of the tree is gone."""
    tree = _tree(proc.pid) if proc.poll() is None else []
    if unit is not None:
        unit.kill()
    if iso.mode == "bwrap" and proc.poll() is None:
        for child in _children(proc.pid):
            _kill(child, lambda p: os.kill(p, signal.SIGKILL))
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("bwrap did not exit after its sandbox was killed; killing its process group")
    _kill(proc.pid, lambda p: os.killpg(p, signal.SIGKILL))
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            stream.close()
        except OSError:
            pass
    if iso.mode == "process" and uid is not None and unit is None:  # a cgroup holds every process of the uid
        reap_uid(uid)
    deadline = time.monotonic() + 10
    for pid in tree[1:]:  # a process with much memory takes a moment to die
        while not _zombie(str(pid)) and time.monotonic() < deadline:
            time.sleep(0.005)


def _kill(pid: int, how: Callable[[int], None]) -> None:
    try:
        how(pid)
    except (ProcessLookupError, PermissionError):
        pass


def reap_uid(uid: int, rounds: int = 200) -> None:
    """SIGKILL every live process owned by ``uid`` until none is left (a fork loop is bounded by RLIMIT_NPROC;
    zombies are skipped: they are dead and wait for their parent)."""
    for _ in range(rounds):
        pids = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.stat(f"/proc/{name}").st_uid == uid and not _zombie(name):
                        pids.append(int(name))
                except OSError:
                    continue
        if not pids:
            return
        for pid in pids:
            _kill(pid, lambda p: os.kill(p, signal.SIGKILL))
        time.sleep(0.005)
    log.warning("processes of sandbox uid %d survived %d kill rounds", uid, rounds)


def _zombie(pid: str) -> bool:
    """A process that has exited and waits to be reaped by its parent (nothing left to kill)."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _remove(path: str) -> None:
    try:
        shutil.rmtree(path)
    except OSError:
        for dirpath, _dirs, _files in os.walk(path):
            try:
                os.chmod(dirpath, 0o700)
            except OSError:
                pass
        shutil.rmtree(path, ignore_errors=True)
