"""Speed against vLLM (``make bench-vllm``): the same prompt token ids and the same forced number of greedy tokens
through our decode engine (``none``, ``snapstream``, ``rkv`` at the same KV entries) and through vLLM (``none``), at
several row counts; each side in its own environment, exchanging token ids and timings through JSON files."""
