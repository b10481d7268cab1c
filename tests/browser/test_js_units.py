"""Runs the JavaScript unit tests (tests/browser/js/*.test.mjs) with node's test runner.

These need node (>= 18) but no browser. Without node they are skipped, saying why.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
JS_TESTS = sorted((HERE / "js").glob("*.test.mjs"))


def _node() -> str:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node is not installed: the JavaScript unit tests cannot run")
    version = subprocess.run([node, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    major = int(version.lstrip("v").split(".")[0] or 0)
    if major < 18:
        pytest.skip(f"node {version} is too old for node:test (need >= 18)")
    return node


@pytest.mark.parametrize("path", JS_TESTS, ids=lambda p: p.name)
def test_js(path: Path) -> None:
    node = _node()
    proc = subprocess.run([node, "--test", str(path)], capture_output=True, text=True,
                          timeout=60, cwd=HERE, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
