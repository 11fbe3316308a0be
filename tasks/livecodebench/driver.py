"""The program runner that executes inside the sandbox: one fresh interpreter per graded program.

Run as ``python -S -B driver.py JOB.json`` (stdlib only; ``-S`` skips the ``site`` scan, the job carries the import
path instead). It reads the job (the code, the test inputs, the limits), applies the rlimits, drops privileges
when asked, then runs every test in this one process and streams *what the program produced* to the parent as JSON
lines on the file descriptor that was its stdout at start. It never sees the expected outputs: the parent compares,
so a program that tampers with this process (or writes into the result channel) can at worst report outputs it
computed itself.

Protocol (one JSON object a line): ``ready`` → ``compiled`` | ``compile_error`` | ``load_error`` → for each test
``start {i}`` then ``result {i, ok, value|error}`` (a stdin test: ``result {i, ok, stdout_bytes, truncated}``
followed by that many raw bytes of output) → ``done``. The parent enforces every deadline.

Execution semantics follow LiveCodeBench's ``lcb_runner/evaluation/testing_util.py``: the same prelude of star
imports; stdin programs have a trailing ``if __name__ == '__main__':`` unwrapped, their imports hoisted and the rest
wrapped into one function called once per test (``SystemExit`` ends a test normally); functional programs are
executed as a module named ``tmp_sol`` and, when the text contains ``class Solution``, called on one ``Solution()``
instance with ``json.loads`` of each input line as arguments.

Two I/O protocols (``job["protocol"]``, ``task.protocol``):

* ``lcb_runner`` (default): as ``run_test`` runs a program. Before the program loads, :func:`reliability_guard`
  disables what the official ``reliability_guard()`` disables (``os.fork``, ``os.kill``, ``os.getcwd``, ``os.putenv``
  (so ``os.environ[...] = ...``), ``subprocess.Popen``, ``quit``, ``help``, ``import resource`` …) and
  ``sys.set_int_max_str_digits(50000)`` applies (``compute_code_generation_metrics.py``). During each stdin test,
  stdin and stdout behave as ``call_method``'s patches and ``Capturing`` make them: ``sys.stdin`` is
  :class:`LcbStdin` (``read()`` the whole input, ``readline()``, ``readlines()`` split on ``"\\n"``, ``buffer.read()``
  bytes, ``buffer.readline()`` always the first line; not iterable), the stdin object bound before the test (``from
  sys import stdin``) answers ``read``/``readline``/``readlines`` from the input, ``sys.stdout`` is a string buffer
  (no ``.buffer``; ``close()`` raises), and file descriptors 0/1 are empty/discarded (``open(0)``, ``os.read(0)``,
  ``os.write(1)`` see nothing of the test). Functional tests are called without patches.
* ``strict``: stdin and stdout are real file descriptors (``sys.stdin.buffer``, ``open(0)``, ``sys.stdout.buffer``
  behave as on a judge); no guard, Python's default integer digit limit.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import os
import resource
import sys
import tempfile
import threading
import types

# The official prelude: star imports first (builtins re-imported after math/io so that pow/open stay builtins),
# then the plain module imports (so that `datetime` names the module), then a deep recursion limit.
_STAR = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
         "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing")
_PLAIN = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
          "itertools", "functools", "operator", "io", "sys", "json")
PRELUDE = "".join(f"from {m} import *\n" for m in _STAR) + "".join(f"import {m}\n" for m in _PLAIN) + \
    "sys.setrecursionlimit(50000)\n"

_LIMITS = {"cpu_s": resource.RLIMIT_CPU, "as_bytes": resource.RLIMIT_AS, "fsize_bytes": resource.RLIMIT_FSIZE,
           "nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC}
_MAX_ERROR = 400


class Channel:
    """The result pipe to the parent (a private duplicate of the original stdout)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, **msg: object) -> None:
        self._write((json.dumps(msg, ensure_ascii=False, allow_nan=True) + "\n").encode("utf-8", "surrogatepass"))

    def send_output(self, i: int, data: bytes, truncated: bool) -> None:
        """A stdin test's result: a header line giving the size, then the output's raw bytes (so that the parent
        can hold them once, in a buffer of exactly that size)."""
        self.send(ev="result", i=i, ok=True, stdout_bytes=len(data), truncated=truncated)
        self._write(data)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]


def _exit(code: object = None) -> None:
    """``exit()``/``quit()`` as ``site`` defines them: raise SystemExit."""
    raise SystemExit(code)


def describe(exc: BaseException) -> str:
    """``Type: message``, bounded; never raises even for hostile exception objects."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 - a program's exception may break str()
        text = type(exc).__name__
    return text[:_MAX_ERROR]


def own_task_count() -> int:
    """Tasks (threads) that run under this real uid, as RLIMIT_NPROC counts them."""
    uid, total = os.getuid(), 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", encoding="ascii", errors="replace") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields["Threads"].split()[0])
        except (OSError, KeyError, ValueError):
            continue
    return total


def apply_limits(limits: dict, nproc_relative: bool) -> None:
    """Lower the rlimits (never above an existing hard limit). CPU gets one second of grace between SIGXCPU and
    SIGKILL; ``nproc`` counts on top of the tasks already running under this uid when ``nproc_relative``."""
    for key, value in limits.items():
        if value is None:
            continue
        value = int(value) + (own_task_count() if key == "nproc" and nproc_relative else 0)
        which = _LIMITS[key]
        hard = resource.getrlimit(which)[1]
        soft, new_hard = value, value + 1 if key == "cpu_s" else value
        if hard != resource.RLIM_INFINITY:
            soft, new_hard = min(soft, hard), min(new_hard, hard)
        resource.setrlimit(which, (soft, new_hard))


def drop_privileges(uid: int) -> None:
    """Become ``uid`` with an empty capability bounding set (the setuid clears the other sets)."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as fh:
        last = int(fh.read())
    for cap in range(last + 1):
        if prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise RuntimeError("privilege drop failed: PR_CAPBSET_DROP")
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("privilege drop failed")


def watch_parent(fd: int) -> None:
    """End the whole sandbox when the parent goes away (its end of this pipe closes)."""
    killpg = os.killpg  # bound now: the lcb_runner guard sets os.killpg to None

    def _wait() -> None:
        try:
            while os.read(fd, 4096):
                pass
        except OSError:
            pass
        try:
            killpg(0, 9)
        finally:
            os._exit(1)

    threading.Thread(target=_wait, name="parent-watch", daemon=True).start()


# ----------------------------------------------------------------------------------------------- lcb_runner I/O

# testing_util.reliability_guard(): the names it sets to None (maximum_memory_bytes is not passed by run_test).
_GUARD_OS = ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
             "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
             "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir")
_GUARD_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")
INT_MAX_STR_DIGITS = 50000  # lcb_runner/evaluation/compute_code_generation_metrics.py
# testing_util.py imports numpy at module level, so numpy is loaded before its guard runs: numpy's import calls
# os.putenv, which the guard disables, so a program's own `import numpy` (or pandas/scipy, which import numpy) only
# works because numpy is already in sys.modules. Loaded here only for programs that name one of these (others never
# see the difference; the import costs ~0.1 s).
_PRELOADED_BY_LCB = ("numpy",)
_NEEDS_NUMPY = ("numpy", "pandas", "scipy")


def preload_like_lcb_runner(code: str) -> None:
    """Import what lcb_runner's ``testing_util`` has imported before its ``reliability_guard()`` (numpy), when the
    program names numpy, pandas or scipy. A missing library is left for the program's own import to report."""
    if not any(name in code for name in _NEEDS_NUMPY):
        return
    for name in _PRELOADED_BY_LCB:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - the program's own import then fails as it would officially
            pass


def reliability_guard() -> None:
    """Disable what lcb_runner's ``reliability_guard()`` disables, in this process, before the program loads.
    Not a security measure (the sandbox is); it makes the same programs fail as fail officially."""
    import faulthandler
    import shutil
    import subprocess

    faulthandler.disable()
    builtins.quit = None
    builtins.help = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in _GUARD_OS:
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    for name in _GUARD_MODULES:
        sys.modules[name] = None
    sys.set_int_max_str_digits(INT_MAX_STR_DIGITS)


class LcbStdinBuffer:
    """``sys.stdin.buffer`` during an lcb_runner test: ``read()`` the whole input as bytes, ``readline()`` always
    its first line (testing_util ``MockBuffer``)."""

    def __init__(self, text: str) -> None:
        self._data = text.encode("utf-8", "surrogatepass")

    def read(self, *args: object) -> bytes:
        return self._data

    def readline(self, *args: object) -> bytes:
        return self._data.split(b"\n")[0] + b"\n"


class LcbStdin:
    """``sys.stdin`` during an lcb_runner test (testing_util ``MockStdinWithBuffer``): ``read()`` returns the whole
    input every time, ``readline()`` reads on, ``readlines()`` is the input split on newlines (no line ends, a
    trailing ``""``), other attributes are those of a string buffer; it defines no ``__iter__``, so ``for line in
    sys.stdin`` raises ``TypeError``."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._lines = io.StringIO(text)
        self.buffer = LcbStdinBuffer(text)

    def read(self, *args: object) -> str:
        return self._text

    def readline(self, *args: object) -> str:
        return self._lines.readline(*args)

    def readlines(self, *args: object) -> list[str]:
        return self._text.split("\n")

    def __getattr__(self, name: str) -> object:
        return getattr(self._lines, name)


def _lcb_open(text: str):
    """``builtins.open`` during a test (``mock_open(read_data=inputs)``): any path, a fresh reader over the input;
    writes are dropped. (Programs see it only through ``builtins.open``: the prelude's ``from builtins import *``
    binds the real ``open`` first, as officially.)"""
    def fake_open(*args: object, **kwargs: object) -> io.StringIO:
        handle = io.StringIO(text)
        handle.write = lambda *a, **k: None  # type: ignore[method-assign]
        return handle

    return fake_open


class BoundedCapture(io.StringIO):
    """``Capturing``'s string buffer with a bound: past ``limit`` characters a write fails with "File too large" (as
    the file size limit makes a real stdout fail), so a flood cannot exhaust memory. The grader raises the limit
    above twice the largest expected output, so no correct program reaches it."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, text: str) -> int:
        if self.tell() + len(text) > self.limit:
            raise OSError(27, "File too large")  # EFBIG
        return super().write(text)


def run_stdin_lcb(function, inputs: list[str], max_output: int, chan: Channel) -> None:
    """Each stdin test as ``grade_stdio`` + ``call_method`` + ``Capturing`` run it (see the module docstring)."""
    bound_stdin, real_open = sys.stdin, builtins.open
    for i, text in enumerate(inputs):
        lines = iter(text.split("\n"))
        patched = {"read": lambda *a, _t=text: _t, "readline": lambda *a, _l=lines: next(_l),
                   "readlines": lambda *a, _t=text: _t.split("\n")}
        for name, fn in patched.items():
            setattr(bound_stdin, name, fn)
        capture = BoundedCapture(max_output)
        capture.close = lambda x: 1  # type: ignore[method-assign]  # Capturing: close() with no argument raises
        sys.stdin, sys.stdout, builtins.open = LcbStdin(text), capture, _lcb_open(text)
        chan.send(ev="start", i=i)
        try:
            error = call_program(function)
        finally:
            sys.stdin, sys.stdout, builtins.open = bound_stdin, sys.__stdout__, real_open
            for name in patched:
                try:
                    delattr(bound_stdin, name)
                except AttributeError:
                    pass
        if error is not None:
            chan.send(ev="result", i=i, ok=False, error=error)
            return
        try:
            out = capture.getvalue()
        except BaseException as exc:  # noqa: BLE001 - the program may have broken the buffer
            chan.send(ev="result", i=i, ok=False, error=describe(exc))
            return
        data = out.encode("utf-8", "surrogatepass")
        del out
        chan.send_output(i, data[:max_output], len(data) > max_output)


# ----------------------------------------------------------------------------------------------- code shaping


def unwrap_main_guard(tree: ast.Module) -> None:
    """Replace a trailing ``if __name__ == '__main__':`` block by its body (official ``clean_if_name``)."""
    if tree.body and isinstance(tree.body[-1], ast.If):
        last = tree.body[-1]
        if ast.unparse(last.test).strip() == "__name__ == '__main__'":
            tree.body[-1:] = last.body


def stdin_program(code: str) -> str:
    """Imports hoisted to module level, every other statement inside ``wrapped_function`` (official
    ``make_function``), behind the prelude. Raises SyntaxError for code that does not parse."""
    tree = ast.parse(code)
    unwrap_main_guard(tree)
    imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    others = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    func = ast.parse("def wrapped_function():\n    pass\n").body[0]
    if others:
        func.body = others
    module = ast.Module(body=[*imports, func], type_ignores=[])
    return PRELUDE + "\n" + ast.unparse(ast.fix_missing_locations(module)) + "\n"


def load(kind: str, code: str, func_name: str | None, chan: Channel):
    """Compile and execute the program's module; return the callable to test, or None after reporting why."""
    try:
        source = stdin_program(code) if kind == "stdin" else PRELUDE + "\n\n" + code
        compiled = compile(source, "<solution>", "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        chan.send(ev="compile_error", error=describe(exc))
        return None
    module = types.ModuleType("tmp_sol")
    try:
        exec(compiled, module.__dict__)  # noqa: S102 - this is the sandboxed program
        if kind == "stdin":
            return module.__dict__["wrapped_function"]
        target = module.Solution() if "class Solution" in code else module
        return getattr(target, func_name)
    except SystemExit:
        chan.send(ev="load_error", error="SystemExit while loading the program")
    except BaseException as exc:  # noqa: BLE001 - anything the program raises is its failure
        chan.send(ev="load_error", error=describe(exc))
    return None


# ----------------------------------------------------------------------------------------------- running tests


def to_wire(value: object, depth: int = 0) -> object:
    """A JSON value that equals the expected ``json.loads(output)`` exactly when ``value == expected`` would
    (nested tuples, non-string dict keys and foreign objects become markers that equal no JSON value)."""
    if depth > 200:
        return {"$lcb": "too_deep"}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [to_wire(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return {"$lcb": "tuple", "items": [to_wire(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: to_wire(v, depth + 1) for k, v in value.items()}
        return {"$lcb": "dict", "repr": describe_obj(value)}
    item = getattr(value, "item", None)  # numpy scalars compare equal to Python numbers
    if callable(item) and getattr(value, "ndim", 0) == 0:
        scalar = item()
        if scalar is None or isinstance(scalar, (bool, int, float, str)):
            return scalar
    return {"$lcb": type(value).__name__, "repr": describe_obj(value)}


def call_program(function) -> str | None:
    """Run a stdin/stdout program's entry point: None when it returned or called ``exit()``, else its failure
    (:func:`describe`)."""
    try:
        function()
    except SystemExit:
        return None
    except BaseException as exc:  # noqa: BLE001 - the program's failure
        return describe(exc)
    return None


def describe_obj(value: object) -> str:
    try:
        return repr(value)[:200]
    except BaseException:  # noqa: BLE001
        return "<unrepresentable>"


def run_functional(method, inputs: list[str], chan: Channel) -> None:
    for i, text in enumerate(inputs):
        args = [json.loads(line) for line in text.split("\n")]
        chan.send(ev="start", i=i)
        try:
            value = method(*args)
            if isinstance(value, tuple):
                value = list(value)
            wire = to_wire(value)
        except BaseException as exc:  # noqa: BLE001 - SystemExit included: official counts it as an error
            chan.send(ev="result", i=i, ok=False, error=describe(exc))
            return
        chan.send(ev="result", i=i, ok=True, value=wire)


def run_stdin(function, inputs: list[str], max_output: int, chan: Channel) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    original_stdout = sys.__stdout__
    for i, text in enumerate(inputs):
        with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as fout:
            fin.write(text.encode("utf-8", "surrogatepass"))
            fin.flush()
            fin.seek(0)
            os.dup2(fin.fileno(), 0)
            os.dup2(fout.fileno(), 1)
            sys.stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding="utf-8")
            out = sys.stdout = io.TextIOWrapper(io.open(1, "wb", closefd=False), encoding="utf-8")
            chan.send(ev="start", i=i)
            error = call_program(function)
            for stream in (out, original_stdout):
                try:
                    stream.flush()
                except BaseException:  # noqa: BLE001 - a closed or replaced stream loses its output
                    pass
            os.dup2(null, 0)
            os.dup2(null, 1)
            if error is not None:
                chan.send(ev="result", i=i, ok=False, error=error)
                return
            fout.seek(0)
            raw = fout.read(max_output + 1)
        chan.send_output(i, raw[:max_output], len(raw) > max_output)


def main(argv: list[str]) -> int:
    chan = Channel(os.dup(1))
    watch_parent(os.dup(0))
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    with open(argv[1], encoding="utf-8") as fh:
        job = json.load(fh)
    if job.get("sys_path") is not None:  # started with -S: the import path of a normal run, without the job folder
        sys.path[:] = job["sys_path"]
    builtins.exit = builtins.quit = _exit  # normally installed by `site`
    apply_limits(job.get("limits", {}), bool(job.get("nproc_relative")))
    if job.get("uid") is not None:
        drop_privileges(int(job["uid"]))
    chan.send(ev="ready", uid=os.getuid())
    if job["kind"] == "probe":  # the sandbox works: temporary files included
        with tempfile.TemporaryFile() as fh:
            fh.write(b"probe")
        chan.send(ev="done")
        return 0
    lcb = job.get("protocol", "lcb_runner") == "lcb_runner"
    if lcb:
        preload_like_lcb_runner(job["code"])  # testing_util's module-level `import numpy as np`
        reliability_guard()  # run_test: the guard comes before the program is compiled
    target = load(job["kind"], job["code"], job.get("func_name"), chan)
    if target is None:
        return 0
    chan.send(ev="compiled")
    if job["kind"] == "stdin" and lcb:
        run_stdin_lcb(target, job["inputs"], int(job["max_output_bytes"]), chan)
    elif job["kind"] == "stdin":
        run_stdin(target, job["inputs"], int(job["max_output_bytes"]), chan)
    else:
        run_functional(target, job["inputs"], chan)
    chan.send(ev="done")
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv))
