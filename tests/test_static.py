"""House rules that a machine can check: mypy --strict on the packages, ruff everywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_mypy_strict_on_the_packages() -> None:
    r = run("mypy", "--strict", "-p", "hub", "-p", "client_sdk")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff() -> None:
    r = run("ruff", "check", "hub", "client_sdk", "tests", "bench")
    assert r.returncode == 0, r.stdout + r.stderr
