"""The configuration: the only reader of the composed Hydra config.

:func:`evals.config.spec.check` validates a composed config (one validator per ``gen.*`` key in
:mod:`evals.config.gen`) and returns the frozen :class:`~evals.config.spec.RunSpec` that planning, execution and
recording read instead of the raw config. Importing this package imports nothing else.
"""
