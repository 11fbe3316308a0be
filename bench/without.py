"""Run a module or code with some top-level packages made unimportable, as on a site GPU stack that lacks them.

    python -m bench.without hydra,omegaconf,datasets,lm_eval -m bench.gpu_check --tiny --out DIR
    python -m bench.without hydra,omegaconf -c "import bench.gpu_check"

An import of a blocked package (or of any of its submodules) raises ``ModuleNotFoundError`` naming it, whether or not
it is installed; everything else imports as usual.
"""

from __future__ import annotations

import importlib.abc
import os
import runpy
import sys

ENV = "BENCH_WITHOUT"  # the blocked names, for child processes


class Blocker(importlib.abc.MetaPathFinder):
    """A meta-path finder that refuses the top-level packages ``names`` and their submodules."""

    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by bench.without)", name=fullname)
        return None


def block(names: set[str]) -> None:
    """Make ``names`` unimportable in this process (already imported ones are dropped first)."""
    for mod in [m for m in sys.modules if m.split(".")[0] in names]:
        del sys.modules[mod]
    sys.meta_path.insert(0, Blocker(names))
    os.environ[ENV] = ",".join(sorted(names))  # child processes (bench.gpu_check's stages) block them too


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("-m", "-c"):
        print(__doc__, file=sys.stderr)
        return 2
    block({n for n in argv[0].split(",") if n})
    if argv[1] == "-c":
        sys.argv = ["-c", *argv[3:]]
        exec(compile(argv[2], "<bench.without -c>", "exec"), {"__name__": "__main__"})
        return 0
    sys.argv = [argv[2], *argv[3:]]
    try:
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
