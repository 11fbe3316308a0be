"""Defaults of keys a config may leave out, shared by the check and the planner (plain constants: importing this
imports nothing, so the planner stays free of Hydra and OmegaConf)."""

DEFAULT_MEMORY_GIB = 80.0  # plan.memory_gib when the config has no plan block
