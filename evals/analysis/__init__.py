"""Statistics as a library: intervals and bootstraps, non-inferiority, power, the sequential search procedure and a
run's summary. It imports only :mod:`evals.record`; the commands that read run directories sit on top of it."""
