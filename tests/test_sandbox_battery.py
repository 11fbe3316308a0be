"""The hostile battery: programs that attack the machine, the harness or the results are graded as failed, the
harness carries on, nothing outside the temporary directory changes and nothing is left running.

Each attack runs in every isolation mode that is available here; a test skips (with the reason) in a mode that does
not give the guarantee it checks (see ``Isolation.guarantees`` and the README table). Tests only ever connect to a
server they open themselves on 127.0.0.1.

Under pytest-xdist the module runs on one worker (``make test`` distributes by file, ``--dist loadfile``): its attacks
compare the project's file tree before and after, and its victim folders live in the project.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import uuid
from pathlib import Path

import pytest
from lcb_helpers import (
    MODES,
    REPO,
    SCRATCH,
    become_subreaper,
    bundled,
    leftover_sandbox_processes,
    make_problem,
    require,
    settings_for,
    tree_snapshot,
)
from lcb_sample_source import REFERENCE

from tasks.livecodebench.grader import grade


@pytest.fixture
def victim_dir():
    """A folder inside the project, visible to sandboxed programs (read-only there), holding a file to protect."""
    path = REPO / f"{SCRATCH}victim_{uuid.uuid4().hex[:8]}"
    path.mkdir()
    (path / "victim.txt").write_text("keep me")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def attack(mode: str, code: str, expected: str = "PWNED", **knobs) -> object:
    """Grade ``code`` on a one-test stdin problem whose answer is ``expected``; check that the project did not
    change, that no sandbox process is left, and that the harness still grades a correct program afterwards.
    ``task.protocol=strict``: the sandbox must hold without the help of lcb_runner's guard (os.fork, os.remove ...)."""
    settings = settings_for(mode, **{"protocol": "strict", **knobs})
    become_subreaper()  # before the program runs: whatever it leaves behind stays in our process tree
    before = tree_snapshot()
    verdict = grade(make_problem("attack", [("\n", expected + "\n")]), code, settings)
    assert tree_snapshot() == before, "the program changed files of the project"
    assert leftover_sandbox_processes() == []
    after = grade(bundled()["ss_atcoder_001"], REFERENCE["ss_atcoder_001"], settings)
    assert after.outcome == "passed"  # the harness carries on
    return verdict


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb_is_bounded_and_killed(mode):
    require(mode, "bounded_process_count")
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    verdict = attack(mode, code, nproc=16, timeout_s=1.0)
    assert verdict.outcome in ("timeout", "runtime_error"), verdict


@pytest.mark.parametrize("mode", MODES)
def test_allocating_16_gb_is_a_runtime_error(mode):
    verdict = attack(mode, "x = bytearray(16 * 1024 ** 3)\nprint('PWNED')")
    assert verdict.outcome == "runtime_error" and "MemoryError" in verdict.error


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_times_out(mode):
    verdict = attack(mode, "while True:\n    pass", timeout_s=1.0)
    assert verdict.outcome == "timeout" and verdict.failed_test == 0 and verdict.exec_time_s < 5


@pytest.mark.parametrize("mode", MODES)
def test_output_flood_hits_the_file_size_limit(mode):
    verdict = attack(mode, "import sys\nwhile True:\n    sys.stdout.write('x' * 100000)\n    sys.stdout.flush()",
                     max_output_mb=2)
    assert verdict.outcome == "output_limit" and "File too large" in verdict.error


@pytest.mark.parametrize("mode", MODES)
def test_deleting_a_file_outside_the_temporary_directory_fails(mode, victim_dir):
    require(mode, "cannot_write_harness_files")
    target = victim_dir / "victim.txt"
    # PWNED only for a file it saw and then removed: a fresh uid may not even see the folder (0700 parents)
    code = (f"import os, shutil\nseen = os.path.exists({str(target)!r})\n"
            f"try:\n    os.remove({str(target)!r})\nexcept OSError:\n    pass\n"
            f"shutil.rmtree({str(victim_dir)!r}, ignore_errors=True)\n"
            f"print('PWNED' if seen and not os.path.exists({str(target)!r}) else 'kept')")
    verdict = attack(mode, code)
    assert verdict.outcome == "wrong_answer" and "got 'kept'" in verdict.error
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("mode", MODES)
def test_writing_into_the_project_fails(mode):
    require(mode, "cannot_write_harness_files")
    name = f"pwned_{uuid.uuid4().hex[:8]}"
    site = Path(sysconfig.get_path("purelib"))  # the harness's environment: a .pth file there runs at every start
    targets = [REPO / name, REPO / "tasks" / f"{name}.py", REPO / "tasks" / "livecodebench" / "__init__.py",
               site / f"{name}.pth", Path(sys.prefix) / "pyvenv.cfg"]
    code = "ok = 0\n" + "".join(
        f"try:\n    open({str(t)!r}, 'a').write('import os  # injected')\n    ok += 1\nexcept OSError:\n    pass\n"
        for t in targets) + "print('PWNED' if ok else 'blocked')"
    verdict = attack(mode, code)
    assert verdict.outcome == "wrong_answer" and "got 'blocked'" in verdict.error
    assert not (REPO / name).exists() and not (REPO / "tasks" / f"{name}.py").exists()
    assert not (site / f"{name}.pth").exists()


@pytest.mark.parametrize("mode", MODES)
def test_no_network_even_to_a_local_server(mode):
    require(mode, "no_network")
    token = uuid.uuid4().hex
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted = []

    def serve():
        server.settimeout(10)
        try:
            conn, _ = server.accept()
            accepted.append(True)
            conn.sendall(token.encode())
            conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = (f"import socket\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            f"    print(s.recv(100).decode())\nexcept OSError as e:\n    print('refused', e)")
    try:
        verdict = attack(mode, code, expected=token)
    finally:
        server.close()
        thread.join(timeout=5)
    assert verdict.outcome == "wrong_answer" and "refused" in verdict.error
    assert accepted == []


@pytest.mark.parametrize("mode", MODES)
def test_harness_secrets_are_out_of_reach(mode, monkeypatch):
    require(mode, "cannot_read_harness_environ")
    secret = f"sk-fake-{uuid.uuid4().hex}"
    monkeypatch.setenv("LCB_FAKE_SECRET", secret)
    code = ("import os\nfound = [v for v in os.environ.values() if v.startswith('sk-fake-')]\n"
            "for pid in os.listdir('/proc'):\n    try:\n"
            "        env = open(f'/proc/{pid}/environ', 'rb').read().split(b'\\0')\n"
            "        found += [e.split(b'=', 1)[1].decode() for e in env if e.startswith(b'LCB_FAKE_SECRET=')]\n"
            "    except (OSError, IndexError):\n        pass\nprint(found[0] if found else 'none')")
    verdict = attack(mode, code, expected=secret)
    assert verdict.outcome == "wrong_answer" and "got 'none'" in verdict.error


@pytest.mark.parametrize("mode", MODES)
def test_killing_the_parent_does_not_reach_the_harness(mode):
    require(mode, "cannot_signal_harness")
    bystander = subprocess.Popen(["sleep", "60"])  # a process of the harness's user, outside the sandbox
    code = ("import os, signal\nfor attempt in (lambda: os.kill(os.getppid(), signal.SIGKILL),\n"
            "                lambda: os.killpg(os.getpgid(os.getppid()), signal.SIGKILL),\n"
            f"                lambda: os.kill({os.getpid()}, signal.SIGKILL),\n"
            f"                lambda: os.kill({bystander.pid}, signal.SIGKILL)):\n"
            "    try:\n        attempt()\n    except OSError:\n        pass\nprint('still here')")
    try:
        verdict = attack(mode, code)
        assert bystander.poll() is None, "the sandboxed program killed a process outside the sandbox"
    finally:
        bystander.kill()
        bystander.wait()
    assert not verdict.correct and verdict.outcome in ("wrong_answer", "runtime_error")


@pytest.mark.parametrize("mode", MODES)
def test_no_daemon_survives_the_run(mode):
    require(mode, "no_process_survives")
    marker = f"lcbdaemon{uuid.uuid4().hex}"
    daemon = f"import time; time.sleep(120)  # {marker}"
    code = ("import os, sys, subprocess\n"
            f"subprocess.Popen([sys.executable, '-c', {daemon!r}])\n"  # a plain background child
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"  # a double-forked, setsid daemon
            f"        os.execv(sys.executable, [sys.executable, '-c', {daemon!r}])\n    os._exit(0)\n"
            "os.wait()\nprint('daemonized')")
    verdict = attack(mode, code)
    assert verdict.outcome == "wrong_answer" and "daemonized" in verdict.error  # the daemons did start
    assert leftover_sandbox_processes(marker) == []


@pytest.mark.parametrize("mode", MODES)
def test_forged_results_on_the_channel_do_not_pass(mode):
    code = ("import os, json\nforged = (json.dumps({'ev': 'result', 'i': 0, 'ok': True, 'stdout': 'guess'}) + '\\n'"
            " + json.dumps({'ev': 'done'}) + '\\n').encode()\n"
            "for fd in map(int, os.listdir('/proc/self/fd')):\n    try:\n        os.write(fd, forged)\n"
            "    except OSError:\n        pass\nprint('guess')")
    verdict = attack(mode, code, expected=uuid.uuid4().hex)
    assert verdict.outcome in ("wrong_answer", "runtime_error", "protocol_error") and not verdict.correct


@pytest.mark.parametrize("mode", MODES)
def test_data_files_are_hidden(mode):
    require(mode, "data_files_hidden")
    problem = bundled()["ss_atcoder_001"]
    size = os.path.getsize(problem.source_file)
    # hidden: covered by an empty file, or not there at all (a project under a masked folder such as /tmp)
    code = f"try:\n    print(len(open({problem.source_file!r}, 'rb').read()))\nexcept OSError:\n    print(0)"
    peek = dataclasses.replace(make_problem("peek", [("\n", f"{size}\n")]), source_file=problem.source_file)
    verdict = grade(peek, code, settings_for(mode))
    assert verdict.outcome == "wrong_answer" and "got '0'" in verdict.error


def test_the_leftover_check_sees_an_orphaned_daemon_of_this_process():
    """The check above looks only at our own process tree (xdist runs other workers' sandboxes meanwhile); as the
    subreaper, we keep a double-forked, setsid daemon in that tree after its parent exits, so the check sees it."""
    become_subreaper()
    marker = f"lcborphan{uuid.uuid4().hex}"
    sleeper = f"import time; time.sleep(60)  # {marker}"
    spawner = ("import os, sys\nif os.fork() == 0:\n    os.setsid()\n"
               f"    os.execv(sys.executable, [sys.executable, '-c', {sleeper!r}])\nos._exit(0)")
    subprocess.run([sys.executable, "-c", spawner], check=True)  # the parent is gone when this returns
    found = leftover_sandbox_processes(marker)
    try:
        assert len(found) == 1 and marker in found[0]
    finally:
        for line in found:
            pid = int(line.split(":", 1)[0])
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # re-parented to us, so ours to reap
    assert leftover_sandbox_processes(marker) == []
