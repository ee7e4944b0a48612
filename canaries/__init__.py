"""The canary and triage suites (``pytest -m canary``, ``-m triage``), installed as ``sbxcheck.suites.canaries``."""
