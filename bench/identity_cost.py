"""What identifying a run by content adds to its start (before any weights load), each part timed in a fresh process:

* ``weights``: :func:`evals.config.models.weights_identity` of ``smollm2_135m`` (the converted folder hashed by
  content: its 540 MB of weights once, then remembered) and of ``tiny_llama`` (the tokenizer files only), with the
  trust check of the folder and the scan for stale conversions;
* ``prompt files``: :func:`evals.execute.code_identity.prompt_data` of needle (its 180 KB haystack and word lists) and
  of LongBench-v2 (its templates), read and hashed at every call;
* ``package versions``: the generation and grading package versions (``importlib.metadata``).

``--cold``: the weights of a private copy of the converted folder, with an empty memo (the one-time cost).

    python -m bench.identity_cost --rounds 3 [--cold]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("bench.identity_cost")

PROBE = """
import json, time
t0 = time.perf_counter()
from evals.config.models import weights_identity
from evals.execute.code_identity import GENERATION_PACKAGES, GRADING_DISTRIBUTIONS, prompt_data, versions
from omegaconf import OmegaConf
from tasks.registry import get_task
out = {}
for name, node in (("smollm2_135m", {"source": "embedded"}), ("tiny_llama", {"source": "random", "seed": 0})):
    cfg = OmegaConf.create(node)  # the two keys weights_identity reads of conf/model/<name>.yaml
    t = time.perf_counter(); weights_identity(cfg); out[f"weights {name}"] = time.perf_counter() - t
for name in ("needle", "longbench_v2"):
    task = get_task(name)
    t = time.perf_counter(); prompt_data(task); out[f"prompt files {name}"] = time.perf_counter() - t
t = time.perf_counter(); versions(GENERATION_PACKAGES); versions(GRADING_DISTRIBUTIONS)
out["package versions"] = time.perf_counter() - t
print(json.dumps(out))
"""


def probe(env: dict[str, str]) -> dict[str, float]:
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=root, env=env, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="hash a private copy of the folder with an empty memo")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from evals.config.embedded import EMBEDDED_DIR, embedded_dir

    real = embedded_dir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        if args.cold:
            shutil.copytree(real, Path(tmp) / "src")
        probe(env)  # the memo of the machine's folder filled (a no-op once it is)
        rounds = []
        for r in range(args.rounds):
            if args.cold:
                cache = Path(tmp) / f"cache{r}"
                cache.mkdir()
                shutil.copytree(Path(tmp) / "src", cache / EMBEDDED_DIR)  # a new path: not remembered
                os.chmod(cache / EMBEDDED_DIR, 0o700)
                env = {**env, "SNAPSTREAM_CACHE": str(cache)}
            rounds.append(probe(env))
            if args.cold:
                shutil.rmtree(cache)
    for part in rounds[0]:
        times = [r[part] * 1000 for r in rounds]
        log.info("%-28s median %8.1f ms (rounds: %s)", part, statistics.median(times),
                 ", ".join(f"{t:.1f}" for t in times))
    log.info("load average: %s", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
