"""What a sandboxed program can see and reach: no capability in any set and ``no_new_privs`` (or process mode
refuses), its own PID namespace, nothing shared between programs (SysV IPC, ``/run/lock``, keyrings), fd 2 a pipe,
neither the project, ``results/``, home, the task's data file, the download caches nor a host UNIX socket, no host
path in the sandbox's command lines, fresh uids that are nobody's, and an interpreter in a venv under an open folder
of ``/tmp`` that a program can start again.

Process mode runs with the interpreter the harness itself uses (under a 0700 home when the tests run as root: the
case where dropping root's capabilities is hardest)."""

from __future__ import annotations

import ctypes
import grp
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from lcb_helpers import (
    MODES,
    REPO,
    SCRATCH,
    make_problem,
    needs_filter,
    output_of,
    require,
    run_strict,
    settings_for,
)

from sandbox import isolation, modes, seccomp
from tasks.livecodebench.grader import grade

CAPS = ("import os\nst = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "caps = ' '.join(str(int(st[k], 16)) for k in ('CapEff', 'CapPrm', 'CapBnd', 'CapAmb'))\n"
        "found = [v for v in os.environ.values() if v.startswith('lcbmark-')]\n"
        "for pid in os.listdir('/proc'):\n    try:\n"
        "        found += [e for e in open(f'/proc/{pid}/environ', 'rb').read().split(b'\\0') if b'lcbmark-' in e]\n"
        "    except OSError:\n        pass\n"
        "print(caps, st['NoNewPrivs'].strip(), os.getuid() != 0, 'leak' if found else 'none')")


@pytest.mark.parametrize("mode", MODES)
def test_no_capabilities_or_refusal(mode, monkeypatch):
    """as root, process mode used to keep every capability (interpreter under a 0700 home). Now a program has
    no capability in any set, ``no_new_privs``, a non-root uid and no view of the harness's environment; or the
    mode refuses in one line that says how to get bwrap."""
    monkeypatch.setenv("LCB_HARNESS_MARKER", f"lcbmark-{uuid.uuid4().hex}")
    python = None if mode == "bwrap" else sys.executable
    try:
        modes.resolve(mode, python)
    except ValueError as exc:
        if mode == "bwrap":
            pytest.skip(f"bwrap is not available here: {exc}")
        assert "\n" not in str(exc) and "bubblewrap" in str(exc) and str(exc).startswith("task.sandbox:")
        return
    assert output_of(mode, CAPS) == "0 0 0 0 1 True none"


@pytest.mark.parametrize("mode", MODES)
def test_no_new_privs_and_an_own_pid_namespace(mode):
    code = ("import os\nstatus = open('/proc/self/status').read()\n"
            "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "print('NoNewPrivs:\\t1' in status, os.getpid() < 10, len(pids) < 10)")
    verdict = run_strict(mode, code, "True True True\n")
    assert verdict.outcome == "passed", verdict


@pytest.mark.parametrize("mode", MODES)
def test_sysv_ipc_does_not_outlive_a_program(mode):
    """a SysV message queue made by one program used to be visible to the next (no IPC namespace)."""
    key = 0x1C0000 + os.getpid() % 0xFFFF
    make = (f"import ctypes\nlibc = ctypes.CDLL(None)\nprint('made' if libc.msgget({key}, 0o1666) >= 0 "
            "else 'refused')")
    look = f"import ctypes\nlibc = ctypes.CDLL(None)\nprint('absent' if libc.msgget({key}, 0) < 0 else 'present')"
    try:
        assert output_of(mode, make) in ("made", "refused")
        assert output_of(mode, look) == "absent"
    finally:
        import ctypes

        libc = ctypes.CDLL(None)
        qid = libc.msgget(key, 0)  # old code: the queue is in the harness's namespace; remove it
        if qid >= 0:
            libc.msgctl(qid, 0, None)


@pytest.mark.parametrize("mode", MODES)
def test_run_lock_is_private(mode):
    """``/run/lock`` of the host used to be shared (and kept) between programs in process mode."""
    name = f"lcb_{uuid.uuid4().hex}"
    write = (f"try:\n    open('/run/lock/{name}', 'w').write('x')\n    print('wrote')\nexcept OSError:\n"
             "    print('no')")
    look = f"import os\nprint('present' if os.path.exists('/run/lock/{name}') else 'clean')"
    try:
        output_of(mode, write)
        assert output_of(mode, look) == "clean"
        assert not os.path.exists(f"/run/lock/{name}")
    finally:
        if os.path.exists(f"/run/lock/{name}"):
            os.remove(f"/run/lock/{name}")


def _keyctl(*args) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(*args)


@pytest.mark.parametrize("mode", MODES)
def test_keyrings_are_closed_and_the_harness_keys_unseen(mode):
    """a program used to read a key planted in the harness's session keyring (an ``hf_token``) and to add keys
    for the next program. Now every keyring call fails and ``/proc/keys`` shows nothing of the harness's."""
    needs_filter()
    add_key, keyctl = seccomp.syscall_number("add_key"), seccomp.syscall_number("keyctl")
    desc = f"lcb_hf_token_{uuid.uuid4().hex[:12]}"
    serial = _keyctl(add_key, b"user", desc.encode(), b"secret-token", 12, ctypes.c_long(-3))  # session keyring
    if serial < 0:
        pytest.skip("this process cannot add a key to its session keyring")
    try:
        code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
                f"found = libc.syscall({keyctl}, 10, ctypes.c_long(-3), b'user', {desc.encode()!r}, 0)\n"
                f"added = libc.syscall({add_key}, b'user', b'lcb_planted', b'x', 1, ctypes.c_long(-3))\n"
                f"listed = {desc!r} in open('/proc/keys').read()\n"
                "print('found' if found >= 0 else 'hidden', 'added' if added >= 0 else 'refused',"
                " 'listed' if listed else 'unlisted')")
        assert output_of(mode, code) == "hidden refused unlisted"
    finally:
        _keyctl(keyctl, 3, ctypes.c_long(serial))  # KEYCTL_REVOKE


@pytest.mark.parametrize("mode", MODES)
def test_fd_2_is_never_a_host_file(mode):
    """``fallocate`` on fd 2 (the host's ``stderr.log``) used to take 2 GiB of host disk. Now fd 2 is a pipe."""
    code = ("import os, stat\nkind = 'pipe' if stat.S_ISFIFO(os.fstat(2).st_mode) else 'file'\ntry:\n"
            "    os.posix_fallocate(2, 0, 64 << 20)\n    grew = 'grew'\nexcept OSError:\n    grew = 'refused'\n"
            "print(kind, grew)")
    assert output_of(mode, code) == "pipe refused"


def test_the_sandbox_sees_neither_the_project_nor_results_nor_home():
    """On main bwrap mounted / read-only: a harvester read results/ and passed on its third run."""
    require("bwrap", "read_only_filesystem")
    home = os.path.realpath(os.path.expanduser("~"))
    needed = isolation.interpreter_paths(sys.executable)
    home_files = sorted(os.path.join(home, n) for n in os.listdir(home) if os.path.isdir(home))
    home_files = [p for p in home_files if not any(q == p or q.startswith(p + "/") for q in needed)][:5]
    paths = [str(REPO / "README.md"), str(REPO / "results"), "/run/lock", "/var", str(REPO / "tasks" / "data"),
             str(REPO / ".git"), *home_files]  # home: at most the folders that lead to the interpreter
    code = "import os\nfor p in %r:\n    print(p, os.path.exists(p))\n" % (paths,)
    expected = "".join(f"{p} False\n" for p in paths)
    verdict = grade(make_problem("view", [("\n", expected)]), code, settings_for("bwrap"))
    assert verdict.outcome == "passed", verdict


def test_a_host_unix_socket_is_out_of_reach():
    """A UNIX socket listening in a folder of the project (visible read-only on main): connecting must fail."""
    require("bwrap", "no_network")
    folder = REPO / f"{SCRATCH}sock_{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    path = str(folder / "s")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(path)
        os.chmod(folder, 0o755)
        os.chmod(path, 0o777)
        server.listen(1)
        code = ("import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(%r)\n    print('connected')\n"
                "except OSError:\n    print('refused')\n" % path)
        verdict = grade(make_problem("sock", [("\n", "refused\n")]), code, settings_for("bwrap"))
        assert verdict.outcome == "passed", verdict
    finally:
        server.close()
        os.unlink(path)
        folder.rmdir()


@pytest.mark.parametrize("mode", MODES)
def test_the_data_file_and_caches_are_hidden(mode, monkeypatch, tmp_path):
    """in process mode a program used to read the task's data file (pass@1 100%). Now the data file, the
    project and the download caches are covered in both modes."""
    answer = uuid.uuid4().hex
    data = REPO / f".lcb_data_{uuid.uuid4().hex[:8]}.jsonl"
    cache = Path(tempfile.mkdtemp(prefix="lcb-cache-", dir="/var/cache" if os.access("/var/cache", os.W_OK)
                                  else None))
    try:
        data.write_text(f'{{"answer": "{answer}"}}\n', encoding="utf-8")
        os.chmod(cache, 0o755)
        (cache / "answers.txt").write_text(answer, encoding="utf-8")
        os.chmod(cache / "answers.txt", 0o644)
        monkeypatch.setenv("HF_HOME", str(cache))
        problem = make_problem("s8", [("\n", answer + "\n")])
        problem = type(problem)(**{**problem.__dict__, "source_file": str(data)})
        code = ("def peek(p):\n    try:\n        return open(p).read()\n    except OSError:\n        return ''\n"
                f"text = peek({str(data)!r}) + peek({str(cache / 'answers.txt')!r})\n"
                "import re\nfound = re.findall('[0-9a-f]{32}', text)\nprint(found[0] if found else 'nothing')")
        assert output_of(mode, code, problem=problem) == "nothing"
    finally:
        data.unlink(missing_ok=True)
        shutil.rmtree(cache, ignore_errors=True)


@pytest.mark.parametrize("mode", MODES)
def test_no_host_path_in_the_sandbox_command_lines(mode):
    """bwrap's whole command line (the job folder, home, the project) used to show in ``/proc/1/cmdline``."""
    host = [os.path.join(tempfile.gettempdir(), "lcb-"), "--ro-bind", "--tmpfs"]
    if not os.path.abspath(sys.executable).startswith(str(REPO)):  # the interpreter's own path may show
        host.append(str(REPO))
    code = ("import os\ntext = ''\nfor pid in os.listdir('/proc'):\n    if pid.isdigit():\n        try:\n"
            "            text += open(f'/proc/{pid}/cmdline').read()\n        except OSError:\n            pass\n"
            f"print('leak' if any(h in text.replace(chr(0), ' ') for h in {host!r}) else 'clean')")
    assert output_of(mode, code) == "clean"


def test_fresh_uids_are_nobody_s(monkeypatch):
    """the fresh uid was never checked: on a collision a program read that user's files and the cleanup
    killed that user's processes. Now an account's uid, a group's and a running process's are never drawn."""
    uids = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
    taken_account = next((u for u in sorted(uids) if u > 0 and u + 1 not in uids), None)
    if taken_account is None:
        pytest.skip("no account to collide with")
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("starting a process under another uid needs root and setpriv")
    busy = 0x40000000 + 7
    proc = subprocess.Popen([setpriv, f"--reuid={busy}", f"--regid={busy}", "--clear-groups", "sleep", "30"])
    try:
        iso = isolation.Isolation("process", sys.executable, fresh_uid=True)
        seen = set()
        for low in (taken_account, busy):
            monkeypatch.setattr(isolation, "_UID_RANGE", (low, low + 2))
            for _ in range(20):
                uid = iso.new_uid()
                seen.add(uid)
                isolation.release_uid(uid)
        assert taken_account not in seen and busy not in seen, seen
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("mode", MODES)
def test_a_program_starts_an_interpreter_in_a_venv_under_an_open_tmp_folder(mode, tmp_path_factory):
    """a venv in a 0755 folder under ``/tmp`` (a fresh clone made there) used to be hidden by process
    mode's private ``/tmp``: a program that starts ``sys.executable`` failed."""
    base = Path(tempfile.mkdtemp(prefix="lcb-open-"))
    try:
        os.chmod(base, 0o755)
        venv = base / "venv"
        made = subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], capture_output=True)
        if made.returncode != 0:
            pytest.skip(f"cannot make a venv here: {made.stderr.decode()[-200:]}")
        python = str(venv / "bin" / "python")
        code = ("import subprocess, sys\nr = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], "
                "capture_output=True, text=True)\nprint(r.stdout.strip() or r.stderr.strip()[-60:])")
        assert output_of(mode, code, python=python) == "42"
    finally:
        shutil.rmtree(base, ignore_errors=True)
