"""Hostile inputs, round 3 (the sandbox): limits that hold for a whole sandbox (CPU of children the kernel reaps,
memory over every process), nothing shared between programs (keyrings), no memory or capabilities outside the limits
(``memfd_secret``, user namespaces), fd 2 never a host file, no test data in process mode, fresh uids that are
nobody's, nothing left in host folders, no host path in the sandbox's ``/proc/1/cmdline``, and an interpreter in a
venv under an open folder of ``/tmp`` that a program can start again."""

from __future__ import annotations

import ctypes
import grp
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from lcb_helpers import MODES, REPO, make_problem

from tasks.livecodebench import cgroup, isolation, modes, sandbox, seccomp
from tasks.livecodebench.grader import GradeSettings, grade


def settings(mode: str, python: str | None = None, **knobs) -> GradeSettings:
    python = python or (None if mode == "bwrap" else sys.executable)
    try:
        modes.resolve(mode, python)
    except ValueError as exc:
        pytest.skip(f"{mode} isolation is not available here: {exc}")
    return GradeSettings.from_cfg({"sandbox": mode, "python": python, "protocol": "strict", "timeout_s": 3.0,
                                   "memory_mb": 1024, "exec_workers": 1, **knobs})


def output_of(mode: str, code: str, problem=None, python: str | None = None, **knobs) -> str:
    """What ``code`` printed (from the wrong-answer detail of a public test that expects a uuid)."""
    problem = problem or make_problem("h3", [("\n", uuid.uuid4().hex + "\n")])
    verdict = grade(problem, code, settings(mode, python, **knobs))
    assert verdict.outcome == "wrong_answer", verdict
    return verdict.error.split("got ", 1)[1].rsplit(", expected", 1)[0].strip("'\"")


def needs_cgroup() -> None:
    if cgroup.base() is None:
        pytest.skip("no cgroup can be made here: the sandbox keeps per-process limits")


def needs_filter() -> None:
    if not seccomp.filter_bytes():
        pytest.skip("no seccomp filter is built on this machine")


# children that each burn 0.05 s of CPU, say how much on a pipe and are reaped by the kernel (SIGCHLD ignored):
# their time never reaches the parent's cutime, and they are gone before the next read of the process tree
REAPED_SPINNERS = ("import os, signal, time\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\nr, w = os.pipe()\n"
                   "for _ in range({n}):\n    if os.fork() == 0:\n        end = time.process_time() + 0.05\n"
                   "        while time.process_time() < end:\n            pass\n"
                   "        os.write(w, b'%.4f ' % time.process_time())\n        os._exit(0)\n"
                   "    while True:\n        try:\n            os.waitpid(-1, 0)\n"
                   "        except ChildProcessError:\n            break\n"
                   "os.close(w)\ntotal = 0.0\nwhile True:\n    got = os.read(r, 65536)\n    if not got:\n"
                   "        break\n    total += sum(map(float, got.split()))\nprint(f'{{total:.3f}}')")


@pytest.mark.parametrize("mode", MODES)
def test_cpu_of_children_reaped_by_the_kernel_is_charged(mode, monkeypatch):
    """S1: 4 CPU-s in children the kernel reaped used to be charged as 0.15 s (only the wall deadline stopped
    them). Now the sandbox's cgroup charges them: its clock reads at least the CPU time the children report."""
    needs_cgroup()
    seen = [0.0]
    read = sandbox._Clock.read

    def recording(self):
        seen[0] = max(seen[0], read(self))
        return seen[0]

    monkeypatch.setattr(sandbox._Clock, "read", recording)
    burnt = float(output_of(mode, REAPED_SPINNERS.format(n=16), timeout_s=3.0))
    assert burnt >= 0.7 and seen[0] >= 0.9 * burnt, (burnt, seen[0])


# children that each hold 100 MiB (written) and say so, one line each, on a pipe
HOLDERS = ("import os, select, time\nr, w = os.pipe()\npids = []\nfor _ in range({n}):\n    pid = os.fork()\n"
           "    if pid == 0:\n        os.close(r)\n        block = b'x' * (100 << 20)\n        os.write(w, b'1')\n"
           "        time.sleep(30)\n        os._exit(0)\n    pids.append(pid)\nos.close(w)\nreported = 0\n"
           "while reported < {n} and select.select([r], [], [], 2.0)[0]:\n    got = os.read(r, 64)\n"
           "    if not got:\n        break\n    reported += len(got)\ntime.sleep(0.5)\n"
           "alive = sum(os.waitpid(p, os.WNOHANG) == (0, 0) for p in pids)\n"
           "print('held', alive * 100, 'MiB')")  # children still alive each hold their 100 MiB (an OOM kill ends one)


@pytest.mark.parametrize("mode", MODES)
def test_memory_mb_bounds_the_whole_sandbox(mode):
    """S5: 12 children used to hold 1.35 GiB under ``memory_mb=256`` (the limit was per process). Now the cgroup
    bounds the sandbox: 6 children of 100 MiB cannot all hold theirs under 256 MiB."""
    needs_cgroup()
    out = output_of(mode, HOLDERS.format(n=6), memory_mb=256, timeout_s=5.0)
    assert out.startswith("held ") and int(out.split()[1]) <= 256, out


def _keyctl(*args) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(*args)


@pytest.mark.parametrize("mode", MODES)
def test_keyrings_are_closed_and_the_harness_keys_unseen(mode):
    """S2: a program used to read a key planted in the harness's session keyring (an ``hf_token``) and to add keys
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
def test_memfd_secret_and_user_namespaces_are_refused(mode):
    """S3, S4: ``memfd_secret`` (768 MiB under ``memory_mb=256``) and ``unshare(CLONE_NEWUSER)`` (a tmpfs outside
    every limit, all capabilities inside) used to be allowed. Now both fail, and ``clone3`` says ENOSYS so that
    threads and subprocesses still start through ``clone``."""
    needs_filter()
    secret, clone3 = seccomp.syscall_number("memfd_secret"), seccomp.syscall_number("clone3")
    code = ("import ctypes, os, subprocess, sys, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.syscall.restype = ctypes.c_long\n"
            f"s = libc.syscall({secret}, 0)\nu = libc.unshare(0x10000000)\n"
            f"c = libc.syscall({clone3}, 0, 0)\nerr = ctypes.get_errno()\n"
            "t = threading.Thread(target=lambda: None)\nt.start()\nt.join()\n"
            "p = subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True, text=True).stdout.strip()\n"
            "print('secret' if s >= 0 else 'nosecret', 'userns' if u == 0 else 'nouserns', err == 38, p)")
    assert output_of(mode, code, memory_mb=256) == "nosecret nouserns True 7"


@pytest.mark.parametrize("mode", MODES)
def test_fd_2_is_never_a_host_file(mode):
    """S6: ``fallocate`` on fd 2 (the host's ``stderr.log``) used to take 2 GiB of host disk. Now fd 2 is a pipe."""
    code = ("import os, stat\nkind = 'pipe' if stat.S_ISFIFO(os.fstat(2).st_mode) else 'file'\ntry:\n"
            "    os.posix_fallocate(2, 0, 64 << 20)\n    grew = 'grew'\nexcept OSError:\n    grew = 'refused'\n"
            "print(kind, grew)")
    assert output_of(mode, code) == "pipe refused"


@pytest.mark.parametrize("mode", MODES)
def test_a_stderr_flood_is_read_and_dropped(mode):
    """fd 2 being a pipe, the harness reads it as it comes and keeps only its tail: 64 MiB of stderr neither block
    the program nor reach a host file or the harness's memory, and (as with the official runner) the verdict."""
    code = ("import sys\nfor _ in range(64):\n    sys.stderr.write('x' * (1 << 20))\n    sys.stderr.flush()\n"
            "print('done')")
    verdict = grade(make_problem("flood", [("\n", "done\n")]), code, settings(mode, max_output_mb=2))
    assert verdict.outcome == "passed", verdict


@pytest.mark.parametrize("mode", MODES)
def test_the_data_file_and_caches_are_hidden(mode, monkeypatch, tmp_path):
    """S8: in process mode a program used to read the task's data file (pass@1 100%). Now the data file, the
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


def test_fresh_uids_are_nobody_s(monkeypatch):
    """S12: the fresh uid was never checked: on a collision a program read that user's files and the cleanup
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
def test_nothing_is_left_in_world_writable_host_folders(mode):
    """S13: in process mode a program used to leave files in world-writable host folders. Now the host is
    read-only to it (bwrap: it sees none of them)."""
    if os.geteuid() != 0:
        pytest.skip("making a world-writable folder outside the project needs root")
    folder = Path(tempfile.mkdtemp(prefix="lcb-ww-", dir="/var/lib" if os.access("/var/lib", os.W_OK) else None))
    try:
        os.chmod(folder, 0o1777)
        code = (f"try:\n    open({str(folder / 'left')!r}, 'w').write('x')\n    print('wrote')\nexcept OSError:\n"
                "    print('refused')")
        assert output_of(mode, code) == "refused"
        assert list(folder.iterdir()) == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("mode", MODES)
def test_no_host_path_in_the_sandbox_command_lines(mode):
    """S14: bwrap's whole command line (the job folder, home, the project) used to show in ``/proc/1/cmdline``."""
    host = [os.path.join(tempfile.gettempdir(), "lcb-"), "--ro-bind", "--tmpfs"]
    if not os.path.abspath(sys.executable).startswith(str(REPO)):  # the interpreter's own path may show
        host.append(str(REPO))
    code = ("import os\ntext = ''\nfor pid in os.listdir('/proc'):\n    if pid.isdigit():\n        try:\n"
            "            text += open(f'/proc/{pid}/cmdline').read()\n        except OSError:\n            pass\n"
            f"print('leak' if any(h in text.replace(chr(0), ' ') for h in {host!r}) else 'clean')")
    assert output_of(mode, code) == "clean"


@pytest.mark.parametrize("mode", MODES)
def test_a_program_starts_an_interpreter_in_a_venv_under_an_open_tmp_folder(mode, tmp_path_factory):
    """Issue 39.4: a venv in a 0755 folder under ``/tmp`` (a fresh clone made there) used to be hidden by process
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


def test_a_cgroup_v2_tree_is_used_with_its_limits(tmp_path, monkeypatch):
    """Where cgroup v2 is mounted with the memory and pids controllers (a plain folder stands in for it here), a
    sandbox's cgroup is made below the harness's own, with the whole sandbox's memory and task limits written."""
    own = tmp_path / "user.slice" / "harness"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(cgroup, "_mounts", lambda: [(str(tmp_path), "cgroup2", {"rw"})])
    monkeypatch.setattr(cgroup, "_own_paths", lambda: {"": "/user.slice/harness"})
    cgroup.base.cache_clear()
    try:
        found = cgroup.base()
        assert found == cgroup.Base(2, (("", str(own)),))
        assert set((own / "cgroup.subtree_control").read_text().split()) == {"+memory", "+pids"}
        unit = cgroup.make_unit(256 << 20, 80)
        folder = Path(unit.dirs[0][1])
        assert folder.parent == own and unit.procs_files == [str(folder / "cgroup.procs")]
        assert (folder / "memory.max").read_text() == str(256 << 20) and (folder / "pids.max").read_text() == "80"
        (folder / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
        assert unit.cpu_s() == 1.5
    finally:
        cgroup.base.cache_clear()


def test_no_cgroup_is_said_once_and_the_sandbox_keeps_its_limits(monkeypatch, caplog):
    """Where no cgroup can be made, one warning names why, and sandboxes run without one (per-process limits)."""
    monkeypatch.setattr(cgroup, "_mounts", lambda: [])
    cgroup.base.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="tasks.livecodebench.cgroup"):
            assert cgroup.make_unit(256 << 20, 80) is None and cgroup.make_unit(256 << 20, 80) is None
        assert len(caplog.records) == 1 and "without a cgroup" in caplog.records[0].getMessage()
        assert cgroup.entry_prefix(None)[-2:] == ["0", str(seccomp.syscall_number("keyctl") or 0)]
    finally:
        cgroup.base.cache_clear()


def test_cgroups_a_killed_harness_left_are_removed():
    """A harness killed with ``kill -9`` leaves its sandboxes' (empty) cgroups: the next one removes them."""
    needs_cgroup()
    dead = subprocess.Popen(["true"])
    dead.wait()
    found = cgroup.base()
    stale = [os.path.join(folder, f"lcb-{dead.pid}-0") for _, folder in found.dirs]
    for folder in stale:
        os.mkdir(folder)
    cgroup._remove_stale(found)
    assert not any(os.path.exists(folder) for folder in stale)
