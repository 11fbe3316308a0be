"""The sandbox that runs untrusted, model-written programs: one fresh interpreter per program, isolated (bubblewrap,
or a namespace fallback), bounded (one cgroup, rlimits, a seccomp filter) and timed on its own CPU clock; the parent
keeps the expected outputs and only reads what the program produced. It imports nothing of the rest of the project.

* choosing the isolation: ``modes.py`` (``resolve``: probe bwrap, else process mode or refuse);
* what each mode is and guarantees: ``isolation.py``; their command lines: ``bwrap.py``, ``process_mode.py``; the
  accounting unit: ``cgroup.py``; the system-call filter: ``seccomp.py``;
* one run: ``run.py`` (``execute``: the job, the launch, the end), ``monitor.py`` (the phases and the loop),
  ``channel.py`` (reading the result channel), ``feed.py`` (feeding the inputs), ``clock.py`` (deadlines),
  ``stderr_tail.py``, ``cleanup.py`` (killing what is left), ``proctree.py``, ``scratch.py`` (its folder on the host,
  and those killed harnesses left); the knobs: ``limits.py``;
* what runs inside: ``driver.py`` (one file, stdlib only: it is copied alone into each job folder and started as a
  script with the interpreter's own import path, never imported from the project there).

Its user, :mod:`tasks.livecodebench`, decides what a run's reports mean (the verdict).
"""

from __future__ import annotations

from sandbox.limits import Limits
from sandbox.modes import resolve
from sandbox.monitor import RunResult
from sandbox.run import SandboxError, execute

__all__ = ["Limits", "RunResult", "SandboxError", "execute", "resolve"]
