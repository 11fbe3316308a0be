"""A stand-in for the vLLM worker (tests/test_vllm_backend.py): the same command line and JSON-lines protocol,
standard library only. It prints noise on its stdout after taking the protocol's fd (as vLLM logs), answers
``generate`` with the request's last prompt tokens (at most ``max_tokens``; the end token appended when
``FAKE_VLLM_EOS`` is set), and dies with exit code 3 at the ``generate`` call when ``FAKE_VLLM_DIE=1``."""

import json
import os
import sys


def main():
    if "--versions" in sys.argv[1:]:
        print(json.dumps({"python": "fake", "vllm": "fake-vllm==0.0", "torch": None}))
        return
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    print("INFO vllm-like log line on stdout", flush=True)  # must not reach the protocol
    with open(os.environ.get("FAKE_VLLM_LOG", os.devnull), "a") as log:
        log.write(f"{os.getpid()}\n")
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "shutdown":
            return
        if msg["op"] == "load":
            reply = {"ok": True, "versions": {"vllm": "fake-vllm==0.0"}, "device": {"platform": "cpu"},
                     "model": msg["model"], "engine": msg["engine"]}
        elif msg["op"] == "generate":
            if os.environ.get("FAKE_VLLM_DIE") == "1":
                print("fake worker: out of memory while generating", file=sys.stderr, flush=True)
                sys.exit(3)
            results = []
            for r in msg["requests"]:
                p = r["params"]
                tokens = r["prompt_token_ids"][-p["max_tokens"]:]
                if os.environ.get("FAKE_VLLM_EOS"):
                    tokens = tokens[: p["max_tokens"] - 1] + [p["stop_token_ids"][0]]
                results.append({"id": r["id"], "token_ids": tokens, "finish_reason": "length", "stop_reason": None,
                                "logprobs": None, "timing": None, "seed": p["seed"]})
            reply = {"ok": True, "wall_s": 0.01, "results": results}
        else:
            reply = {"error": f"unknown op {msg['op']!r}"}
        replies.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
