"""The program runner that executes inside the sandbox: one fresh interpreter per graded program.

Run as ``python -S -B driver.py JOB.json`` (stdlib only; ``-S`` skips the ``site`` scan, the job carries the import
path instead). It reads the job (the code, the number of tests, the limits), applies the rlimits, drops privileges
when asked, then runs every test in this one process and streams *what the program produced* to the parent as JSON
lines on the file descriptor that was its stdout at start. It never sees the expected outputs: the parent compares,
so a program that tampers with this process (or writes into the result channel) can at worst report outputs it
computed itself. Nor does it hold the inputs from the start: the parent sends them on the driver's stdin (``"i n\n"``
then ``n`` bytes of UTF-8) one test ahead, and a hidden test's input only once every public test has passed, so
while a public test runs no hidden input is inside the sandbox (public tests come first).

Protocol (one JSON object a line, ASCII): ``ready`` → ``compiled`` | ``compile_error`` | ``load_error`` → for each
test ``start {i}`` then ``result {i, ok, error}`` on a failure, or ``result {i, ok, stdout_bytes, truncated}`` (stdin)
or ``result {i, ok, value_bytes}`` (functional) followed by that many raw bytes: the program's output, or its return
value in the wire form of :func:`to_wire` → ``done``. The parent enforces every deadline.

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
import binascii
import builtins
import collections
import io
import json
import os
import queue
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
        """One header line, ASCII (a lone surrogate in an error message travels as its ``\\udXXX`` escape)."""
        self._write((json.dumps(msg, ensure_ascii=True, allow_nan=True) + "\n").encode("ascii"))

    def send_output(self, i: int, data: bytes, truncated: bool) -> None:
        """A stdin test's result: a header line giving the size, then the output's raw bytes (so that the parent
        can hold them once, in a buffer of exactly that size)."""
        self.send(ev="result", i=i, ok=True, stdout_bytes=len(data), truncated=truncated)
        self._write(data)

    def send_value(self, i: int, data: bytes) -> None:
        """A functional test's result: a header giving the size, then the return value's wire JSON (UTF-8, lone
        surrogates kept as such) as raw bytes, which the parent parses with an object budget."""
        self.send(ev="result", i=i, ok=True, value_bytes=len(data))
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


class Inbox:
    """The parent's end of the driver's stdin: each test's input arrives when that test is due (``"i n\\n"``, then
    ``n`` bytes of UTF-8). When the parent goes away (the pipe closes) the whole sandbox ends."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.ready: queue.Queue = queue.Queue()
        self.killpg, self.exit = os.killpg, os._exit  # bound now: the lcb_runner guard sets os.killpg to None
        threading.Thread(target=self._read, name="parent-inbox", daemon=True).start()

    def _read(self) -> None:
        buf = bytearray()
        try:
            while True:
                nl = buf.find(b"\n")
                while nl < 0:
                    chunk = os.read(self.fd, 1 << 16)
                    if not chunk:
                        raise EOFError
                    buf += chunk
                    nl = buf.find(b"\n")
                i, size = (int(x) for x in bytes(buf[:nl]).split())
                del buf[:nl + 1]
                while len(buf) < size:
                    chunk = os.read(self.fd, max(1 << 16, size - len(buf)))
                    if not chunk:
                        raise EOFError
                    buf += chunk
                self.ready.put((i, bytes(buf[:size]).decode("utf-8", "surrogatepass")))
                del buf[:size]
        except (OSError, ValueError, EOFError):
            pass
        try:
            self.killpg(0, 9)
        finally:
            self.exit(1)

    def get(self, i: int) -> str:
        """Test ``i``'s input (waits for it; the parent's deadlines bound the wait)."""
        got, text = self.ready.get()
        if got != i:
            raise RuntimeError(f"driver: expected the input of test {i}, got {got}")
        return text


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


def run_stdin_lcb(function, inbox: Inbox, n_tests: int, max_output: int, chan: Channel) -> None:
    """Each stdin test as ``grade_stdio`` + ``call_method`` + ``Capturing`` run it (see the module docstring)."""
    bound_stdin, real_open = sys.stdin, builtins.open
    for i in range(n_tests):
        text = inbox.get(i)
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
        compiled = compile(source, "<solution>", "exec", flags=0, dont_inherit=True)  # none of this file's futures
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


BIG_INT_BITS = 8192  # larger ints travel as hex (no decimal conversion, no digit limit on either side)
MAX_WIRE_DEPTH = 200
_SCALARS = frozenset((type(None), bool, float, str))
_DICT_TYPES = (collections.OrderedDict, collections.defaultdict, collections.Counter)  # each == dict as dict
_NUMPY_KINDS = "biufcU"  # bool, ints, floats, complex, unicode; object, bytes, void and datetime arrays are opaque


def _int(value: int) -> object:
    return value if value.bit_length() <= BIG_INT_BITS else {"$lcb": "int", "hex": hex(value)}


def _numpy(value: object, np: types.ModuleType, depth: int) -> object:
    arr = np.asarray(value)
    if arr.dtype.kind == "O" and type(value) is np.ndarray:  # its elements, each in wire form
        return {"$lcb": "numpy", "dtype": "|O", "shape": list(arr.shape),
                "items": [to_wire(v, depth + 1) for v in arr.ravel()]}
    if arr.dtype.kind not in _NUMPY_KINDS or arr.dtype.hasobject or arr.dtype.fields is not None:
        return None
    data = binascii.b2a_base64(np.ascontiguousarray(arr).tobytes(), newline=False).decode("ascii")
    return {"$lcb": "numpy", "dtype": arr.dtype.str, "shape": list(arr.shape), "data": data,
            "scalar": type(value) is not np.ndarray}


# The builtin value of an instance of a builtin type's subclass, copied by the builtin's own C method (never through
# a hook the subclass may override: ``__iter__``, ``keys``, ``__int__``): what the builtin's ``==`` reads.
_BUILTIN_VALUE = {
    int: int.__pos__, float: float.__pos__, complex: complex.__pos__, str: str.__str__, list: list.copy,
    tuple: lambda v: tuple.__getitem__(v, slice(None)), set: set.copy, frozenset: frozenset.copy,
    dict: lambda v: dict(dict.items(v)),
}


def builtin_value(value: object) -> object:
    """The builtin value of an instance of a subclass of a builtin type (``int``, ``float``, ``complex``, ``str``,
    ``list``, ``tuple``, ``set``, ``frozenset``, ``dict``) whose classes before that builtin in the MRO define no
    ``__eq__``: lcb_runner's ``prediction == expected`` then runs the builtin's comparison on the builtin's storage.
    :data:`NotImplemented` for anything else (a subclass with its own ``__eq__`` stays opaque)."""
    for cls in type(value).__mro__:
        copy = _BUILTIN_VALUE.get(cls)
        if copy is not None:
            return copy(value)
        if "__eq__" in cls.__dict__:
            return NotImplemented
    return NotImplemented


def to_wire(value: object, depth: int = 0) -> object:
    """The JSON wire form of a return value, from which the parent rebuilds an equal value of the same standard
    type without running program code (``tasks/livecodebench/values.py``): JSON scalars, lists and str-keyed dicts
    as themselves; ``{"$lcb": tag, ...}`` for an int over :data:`BIG_INT_BITS` bits (``hex``), a tuple, set,
    frozenset or dict with other keys (``items``), ``Fraction`` (``n``, ``d``), ``Decimal`` (``s``), ``complex``
    (``re``, ``im``), a numpy array or scalar (``dtype``, ``shape``, base64 ``data``; an object array: its
    elements' wire forms, ``items``); a subclass of a builtin type that defines no ``__eq__`` as its builtin value
    (:func:`builtin_value`); anything else (a class of the program, a subclass with its own ``__eq__``, an
    iterator, a structure deeper than :data:`MAX_WIRE_DEPTH`) is ``opaque``: it equals nothing. Types are matched
    exactly, never by ``isinstance``."""
    t = type(value)
    if t in _SCALARS:
        return value
    if t is int:
        return _int(value)
    if depth > MAX_WIRE_DEPTH:
        return {"$lcb": "opaque", "type": "too deep"}
    if t is list:
        kinds = set(map(type, value))
        if kinds <= _SCALARS or (kinds <= {int} and max(map(int.bit_length, value)) <= BIG_INT_BITS):
            return value
        return [to_wire(v, depth + 1) for v in value]
    if t is tuple or t is set or t is frozenset:
        return {"$lcb": t.__name__, "items": [to_wire(v, depth + 1) for v in value]}
    if t is dict or t in _DICT_TYPES:
        if "$lcb" not in value and all(type(k) is str for k in value):
            return {k: to_wire(v, depth + 1) for k, v in value.items()}
        return {"$lcb": "dict", "items": [[to_wire(k, depth + 1), to_wire(v, depth + 1)] for k, v in value.items()]}
    if t is complex:
        return {"$lcb": "complex", "re": value.real, "im": value.imag}
    fractions, decimal, np = (sys.modules.get(m) for m in ("fractions", "decimal", "numpy"))
    if fractions is not None and t is fractions.Fraction:
        return {"$lcb": "fraction", "n": _int(value.numerator), "d": _int(value.denominator)}
    if decimal is not None and t is decimal.Decimal:
        return {"$lcb": "decimal", "s": str(value)}
    if np is not None and (t is np.ndarray or (isinstance(value, np.generic) and t.__module__ == "numpy")):
        wire = _numpy(value, np, depth)
        if wire is not None:
            return wire
    plain = builtin_value(value)
    if plain is not NotImplemented:
        return to_wire(plain, depth + 1)
    return {"$lcb": "opaque", "type": t.__name__[:100], "repr": describe_obj(value)}


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


def parse_arguments(text: str) -> list:
    """``json.loads`` of each input line, as ``grade_call_based`` does, with lcb_runner's 50000-digit integers
    whatever the protocol (the program's own conversions keep the protocol's limit)."""
    before = sys.get_int_max_str_digits()
    if 0 < before < INT_MAX_STR_DIGITS:
        sys.set_int_max_str_digits(INT_MAX_STR_DIGITS)
    try:
        return [json.loads(line) for line in text.split("\n")]
    finally:
        if sys.get_int_max_str_digits() != before:
            sys.set_int_max_str_digits(before)


def run_functional(method, inbox: Inbox, n_tests: int, max_output: int, chan: Channel) -> None:
    for i in range(n_tests):
        args = parse_arguments(inbox.get(i))
        chan.send(ev="start", i=i)
        try:
            value = method(*args)
            if isinstance(value, tuple):  # grade_call_based: a top-level tuple becomes a list
                value = list(value)
            data = json.dumps(to_wire(value), ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")
        except BaseException as exc:  # noqa: BLE001 - SystemExit included: official counts it as an error
            chan.send(ev="result", i=i, ok=False, error=describe(exc))
            return
        if len(data) > max_output:
            chan.send(ev="result", i=i, ok=False, error="OSError: [Errno 27] File too large (the return value)")
            return
        chan.send_value(i, data)


def run_stdin(function, inbox: Inbox, n_tests: int, max_output: int, chan: Channel) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    original_stdout = sys.__stdout__
    for i in range(n_tests):
        text = inbox.get(i)
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
    inbox = Inbox(os.dup(0))
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
    run = run_stdin_lcb if job["kind"] == "stdin" and lcb else run_stdin if job["kind"] == "stdin" else run_functional
    run(target, inbox, int(job["n_tests"]), int(job["max_output_bytes"]), chan)
    chan.send(ev="done")
    return 0


if __name__ == "__main__":
    os._exit(main(sys.argv))
