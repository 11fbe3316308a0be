"""Run one graded program in its sandbox: write the job, launch the driver, serve it until the run ends
(:mod:`sandbox.monitor`), kill everything it started and remove its temporary directory (named for this harness
process: :mod:`sandbox.scratch`).

The parent keeps the expected outputs and sends the tests' inputs on the driver's stdin one test ahead, a hidden
test's input only once every public test has its result (a hidden input is never inside the sandbox while a public
test runs); the driver only reports what the program produced (see ``driver.py``). Every phase has a deadline
measured outside the sandbox, on the sandbox's own CPU clock (:mod:`sandbox.clock`); past a deadline the whole
sandbox is killed. The sandbox's stderr is a pipe (never a host file): its last bytes explain a sandbox that did not
start."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from pathlib import Path

from sandbox import cgroup, scratch, seccomp
from sandbox.bwrap import WORK_DIR, bwrap_argv
from sandbox.cleanup import remove_tree, terminate
from sandbox.isolation import Isolation, interpreter_sys_path, release_uid, sandbox_env
from sandbox.limits import Limits, MiB
from sandbox.monitor import OnResult, RunResult, monitor
from sandbox.process_mode import PROCESS_VIEW, process_argv, process_settings
from sandbox.stderr_tail import StderrTail


class SandboxError(RuntimeError):
    """The sandbox itself failed before the program ran (not the program's fault)."""


@functools.lru_cache(maxsize=1)
def _driver_source() -> str:
    """The program that runs inside the sandbox (``driver.py`` beside this file), copied alone into each job."""
    return Path(__file__).with_name("driver.py").read_text(encoding="utf-8")


def _write_job(job_dir: str, iso: Isolation, kind: str, code: str, func_name: str | None, n_tests: int,
               limits: Limits, protocol: str, uid: int | None) -> None:
    """The job folder the driver reads: ``job.json`` (the program, the number of tests, the limits, the import
    path), the driver itself, and ``blank``, the empty world-readable file that covers hidden data files."""
    job = {"kind": kind, "code": code, "func_name": func_name, "n_tests": n_tests, "uid": uid,
           "protocol": protocol,
           "limits": limits.rlimits(n_tests), "max_output_bytes": limits.max_output_mb * MiB,
           "sys_path": interpreter_sys_path(iso.python),
           "nproc_relative": iso.mode == "process" and uid is None and os.geteuid() != 0}
    Path(job_dir, "driver.py").write_text(_driver_source(), encoding="utf-8")
    Path(job_dir, "blank").touch()
    os.chmod(os.path.join(job_dir, "blank"), 0o644)
    with open(os.path.join(job_dir, "job.json"), "w", encoding="utf-8") as fh:
        json.dump(job, fh)


def _command(iso: Isolation, root: str, job_dir: str, tmp_bytes: int, hidden: tuple[str, ...],
             uid: int | None) -> tuple[list[str], dict[str, str], list[int]]:
    """The mode's command line, its environment and the files it reads by descriptor (opened here; the caller
    closes them once the sandbox has started). Settings travel in files, never on a command line that
    ``/proc/1/cmdline`` would show inside."""
    pass_fds: list[int] = []
    if iso.mode == "bwrap":
        bpf = seccomp.filter_bytes()
        if bpf:
            Path(root, "seccomp.bpf").write_bytes(bpf)
            pass_fds.append(os.open(os.path.join(root, "seccomp.bpf"), os.O_RDONLY))
        options, command = bwrap_argv(iso, job_dir, tmp_bytes, hidden, pass_fds[0] if pass_fds else None)
        Path(root, "bwrap.args").write_bytes(b"".join(a.encode() + b"\0" for a in options))
        pass_fds.append(os.open(os.path.join(root, "bwrap.args"), os.O_RDONLY))  # not in /proc/1/cmdline
        return [command[0], "--args", str(pass_fds[-1]), *command[1:]], sandbox_env(WORK_DIR, "/tmp"), pass_fds
    Path(root, "launch.json").write_bytes(process_settings(iso, job_dir, tmp_bytes, uid, hidden))
    pass_fds.append(os.open(os.path.join(root, "launch.json"), os.O_RDONLY))
    return process_argv(iso, pass_fds[-1]), sandbox_env(f"{PROCESS_VIEW}/work", "/tmp"), pass_fds


def execute(iso: Isolation, kind: str, code: str, func_name: str | None, inputs: list[str], limits: Limits,
            on_result: OnResult, hidden: tuple[str, ...] = (), protocol: str = "lcb_runner",
            n_public: int = 0) -> RunResult:
    """Run ``code`` on ``inputs`` in one sandboxed interpreter. ``on_result(i, message)`` sees each test's report
    in order and returns False to stop there. ``protocol``: the program's I/O semantics (see ``driver.py``).
    ``inputs[:n_public]`` are public (shown in the prompt): the others reach the sandbox only after every public
    test has its result.
    Raises :class:`SandboxError` when the sandbox cannot start. The first run of a harness process removes the
    folders that killed harnesses left (:mod:`sandbox.scratch`)."""
    scratch.sweep_once()
    root = scratch.make_root()
    uid, unit = None, None
    try:
        uid = iso.new_uid()
        os.chmod(root, 0o711)
        job_dir = os.path.join(root, "job")
        os.mkdir(job_dir, 0o700)
        _write_job(job_dir, iso, kind, code, func_name, len(inputs), limits, protocol, uid)
        biggest = max((len(x) for x in inputs), default=0)
        tmp_bytes = 2 * limits.max_output_mb * MiB + 4 * biggest + 64 * MiB  # everything it may write, in total
        unit = cgroup.make_unit(limits.memory_mb * MiB, limits.nproc + cgroup.PIDS_OVERHEAD)
        argv, env, pass_fds = _command(iso, root, job_dir, tmp_bytes, hidden, uid)
        try:
            proc = subprocess.Popen([*cgroup.entry_prefix(unit), *argv], cwd=root, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                    close_fds=True, pass_fds=tuple(pass_fds))
        finally:
            for fd in pass_fds:
                os.close(fd)
        start = time.monotonic()
        errors = StderrTail()
        try:
            result = monitor(proc, inputs, n_public, limits, on_result, start, unit, errors)
            if result.phase == "startup" and not proc.stderr.closed:
                errors.drain(proc.stderr.fileno())
        finally:
            terminate(proc, iso, uid, unit)
        if result.phase == "startup":
            tail = errors.data[-2000:].decode("utf-8", "replace").strip()
            raise SandboxError(f"the {iso.mode} sandbox did not start ({result.status}): {tail or result.error}")
        return result
    finally:
        if unit is not None:
            unit.remove()
        release_uid(uid)
        remove_tree(root)


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
