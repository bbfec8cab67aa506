"""The cases of ``benchmarks/micro.py``: each measures what one mechanism of the collectors
costs, the figure a constant or a design choice of ``src/tfdiag/collectors/`` rests on. Each module's
``CASES`` maps a case's name to ``(add_arguments, run)``."""
