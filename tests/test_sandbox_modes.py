"""Choosing and describing the isolation, without running a program: the fallback's one loud warning, a bwrap
request that cannot be met, the limits' accepted ranges, and bwrap's view of the file system (only the interpreter
shown, the project covered around a venv inside it)."""

from __future__ import annotations

import shutil
import sys
import uuid

import pytest

from sandbox import Limits, bwrap, isolation, modes


def test_fallback_warning_is_loud_and_lists_missing_guarantees(caplog):
    iso = isolation.Isolation("process", sys.executable, fresh_uid=False, reason=f"test {uuid.uuid4().hex}")
    with caplog.at_level("WARNING", logger="sandbox.modes"):
        modes.warn_once(iso)
        modes.warn_once(iso)
    records = [r for r in caplog.records if "WITHOUT bubblewrap" in r.getMessage()]
    assert len(records) == 1
    missing = [name for name, ok in iso.guarantees.items() if not ok]
    assert "no_network" in missing and all(name in records[0].getMessage() for name in missing)


def test_bwrap_requested_but_unusable_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    modes._resolve.cache_clear()
    try:
        with pytest.raises(ValueError, match="task.sandbox: bwrap was requested but cannot run here: bwrap is not "
                                             "installed"):
            modes.resolve("bwrap")
    finally:
        modes._resolve.cache_clear()


def test_limits_are_checked():
    with pytest.raises(ValueError, match="task.timeout_s"):
        Limits(timeout_s=0)
    with pytest.raises(ValueError, match="task.memory_mb"):
        Limits(memory_mb=10)


def test_view_shows_only_the_interpreter_and_covers_the_project_around_a_venv_inside_it():
    """A checkout under /tmp with its virtualenv inside: the private /tmp is made first, the venv is bound back
    over it, the project folder around it is never bound (nor home, nor /): hidden data files stay invisible."""
    needed = ("/tmp/ck/p/.venv", "/tmp/ck/p/.venv/lib", "/opt/py/lib/python3.11")
    args = bwrap.view_plan(needed, ("/tmp/ck/p/tasks/data/x.jsonl",), "/blank", ["--perms", "1777"],
                               ("/tmp/ck/p", "/root"))
    text = " ".join(args)
    assert text.startswith("--perms 1777 --tmpfs /tmp")
    assert "--ro-bind /tmp/ck/p/.venv /tmp/ck/p/.venv" in text and "--ro-bind /tmp/ck/p/.venv/lib" not in text
    assert "--ro-bind /opt/py/lib/python3.11 /opt/py/lib/python3.11" in text
    assert "--ro-bind / /" not in text and "--ro-bind /tmp/ck/p /tmp/ck/p" not in text
    assert "/blank" not in text and "/root" not in text  # nothing to cover: neither is visible
    # the project under a shown folder (a checkout inside the interpreter's prefix) is covered, the venv re-shown
    args = bwrap.view_plan(("/opt/py", "/opt/py/src/p/.venv"), ("/opt/py/src/p/data.jsonl",), "/blank",
                               [], ("/opt/py/src/p",))
    text = " ".join(args)
    assert "--tmpfs /opt/py/src/p --ro-bind /opt/py/src/p/.venv /opt/py/src/p/.venv" in text
    assert "--ro-bind /blank" not in text  # covered by the tmpfs already
