"""SLCA where people already train: plug-ins for verl (`integrations/verl.py`) and TRL (`integrations/trl.py`).

They import the top level (advantage.py, rewards.py, segment.py, rollout.py) and call its functions;
nothing at the top level or in lib/ imports them (tests/test_layout.py). Optional requirements:
requirements-integrations.txt; the page: docs/integrations.md.
"""
