"""``make engine-check``: our engine (``compression=none``, the hf backend) and vLLM on the same items, greedy token
ids compared per item, each difference explained by both engines' top-2 log-probabilities (docs/vllm.md)."""
