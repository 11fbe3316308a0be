"""What a run writes and how it is read back: rows, run directories, text and number formats, throughput
and geometry fields. The lowest layer of ``evals``: it imports nothing else of ``evals``."""
