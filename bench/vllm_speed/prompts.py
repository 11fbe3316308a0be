"""The bench's prompts: needle items encoded exactly as ``evals.run task=needle`` feeds them to the model."""

from __future__ import annotations

from bench.models import REPO


def needle_prompts(model: str, context_tokens: int, n_items: int) -> tuple[str | None, list[list[int]]]:
    """(model folder, token ids of each prompt) of ``task=needle task.context_tokens=C task.n_items=N`` for the
    harness model ``model`` (its chat template, system prompt and needle key kind), as ``HFBackend.encode`` gives.
    The folder (what vLLM loads) is None for a model with no weight files (``source: random``, our side only)."""
    from omegaconf import OmegaConf

    from evals.config.encode import encode_prompt
    from evals.config.models import embedded_dir, load_tokenizer
    from tasks import needle

    model_cfg = OmegaConf.load(REPO / "conf" / "model" / f"{model}.yaml")
    task_cfg = OmegaConf.load(REPO / "conf" / "task" / "needle.yaml")
    task_cfg.context_tokens, task_cfg.n_items = context_tokens, n_items
    task_cfg.key_kind = model_cfg.get("needle_key_kind") or "number"
    tokenizer = load_tokenizer(model_cfg)
    items = needle.load(task_cfg)
    ids = [encode_prompt(tokenizer, model_cfg, needle.prompt(it, model_cfg, cfg=task_cfg, tokenizer=tokenizer))
           for it in items]  # fmt: skip
    folder = {"embedded": str(embedded_dir()), "path": model_cfg.path}.get(model_cfg.source)
    return folder, ids
