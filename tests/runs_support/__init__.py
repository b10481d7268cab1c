"""Helpers for tests/test_runs_e2e.py: the agent script and the mock API it calls."""
