"""What the benchmarks share: a local ``ps_ctl`` cluster played from the benchmark's own
process (``cluster``), paired A/B statistics (``stats``), faults made from outside a job
(``faults``), a module as it was at a git revision (``revision``), a worker process
that survives a crash or a hang of what it runs (``isolated``) and a running job's progress
read from its own records (``progress``)."""
