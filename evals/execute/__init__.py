"""Execution: one run of a checked :class:`~evals.config.spec.RunSpec` -> one run directory.

:mod:`.prepare` fixes the run (items, identity, directory, decode rows) before any weights load; :mod:`.loop` runs
it (resume, the full cache's copy, the sample cache, generate, score, write); :mod:`.work` turns pending samples into
requests and scored outcomes; :mod:`.row` builds a ``samples.jsonl`` row; :mod:`.backends` turn prompts into
completions. Importing this package imports nothing else.
"""
