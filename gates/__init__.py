"""The gate suites (``pytest -m gate``, ``pytest -m run``), installed as ``sbxcheck.suites.gates``."""
