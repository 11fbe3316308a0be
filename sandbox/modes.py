"""Which isolation mode a run gets (``task.sandbox``): probe bwrap, else fall back to process mode or refuse.

Kept apart from :mod:`sandbox.isolation` (what each mode is, a leaf) and :mod:`sandbox.run` (running a program),
since choosing needs both: a probe run in each mode.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import sys

from sandbox.isolation import MODES, Isolation
from sandbox.process_mode import exposable
from sandbox.run import probe

log = logging.getLogger(__name__)
HOW_TO_GET_BWRAP = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow user namespaces, "
                    "or pass task.sandbox=bwrap")

_warned: set[str] = set()


def warn_once(iso: Isolation) -> None:
    """One loud warning per process and reason when programs run with reduced isolation."""
    key = f"{iso.mode}:{iso.fresh_uid}:{iso.reason}"
    if iso.mode == "bwrap" or key in _warned:
        return
    _warned.add(key)
    missing = [name for name, ok in iso.guarantees.items() if not ok]
    log.warning(
        "\n%s\nLIVECODEBENCH: model-written code runs WITHOUT bubblewrap isolation (%s).\n"
        "Missing guarantees: %s.\nInstall bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and make sure "
        "unprivileged user namespaces are allowed, or grade on a disposable machine.\n%s",
        "!" * 100, iso.reason, ", ".join(missing) or "none", "!" * 100)


def resolve(requested: str, python: str | None = None) -> Isolation:
    """The isolation for ``task.sandbox`` (``auto``/``bwrap``/``process``); probes once per process."""
    if requested not in MODES:
        raise ValueError(f"task.sandbox: expected one of {', '.join(MODES)}, got {requested!r}")
    return _resolve(requested, os.path.abspath(python or sys.executable))  # no "..": its folders may not exist inside


@functools.lru_cache(maxsize=8)
def _resolve(requested: str, python: str) -> Isolation:
    root = os.geteuid() == 0
    if requested in ("auto", "bwrap"):
        if shutil.which("bwrap") is None:
            reason = "bwrap is not installed"
        else:
            iso = Isolation("bwrap", python, fresh_uid=root, reason="bubblewrap")
            reason = probe(iso)
            if not reason:
                return iso
        if requested == "bwrap":
            raise ValueError(f"task.sandbox: bwrap was requested but cannot run here: {reason}")
    else:
        reason = "task.sandbox=process"
    if root and not exposable(python):  # a program would keep root's uid: refuse rather than run it privileged
        raise ValueError(f"task.sandbox: process mode as root needs an interpreter a fresh uid can start, and "
                         f"{python} lies in a folder closed to other users ({reason}); {HOW_TO_GET_BWRAP}, or "
                         f"pass task.python=<an interpreter readable by all users>")
    iso = Isolation("process", python, fresh_uid=root, reason=reason)
    probe_error = probe(iso)
    if probe_error:
        raise ValueError(f"task.sandbox: process mode cannot run {python} without privileges here ({reason}; it "
                         f"needs PID, mount and IPC namespaces: util-linux unshare, root or user namespaces): "
                         f"{probe_error}; {HOW_TO_GET_BWRAP}")
    warn_once(iso)
    return iso
