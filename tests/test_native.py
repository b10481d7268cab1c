"""The native build (hub/_native.py): the hot modules compiled with mypyc, served only while
they match their source, and the same program as the interpreted one.

``scripts/test`` builds it (through ``scripts/setup``), so the suite runs the compiled modules;
``test_the_interpreted_modules_pass_the_core_tests`` runs the tests of those modules again
with ``A2H_NATIVE=0``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hub
from hub import _native
from hub._native import GROUP_MODULE, MODULES, digest, plan, source_of

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

#: The tests of the compiled modules, run interpreted too.
CORE_TESTS = ["tests/test_core.py", "tests/test_protocol.py", "tests/test_frame_text.py",
              "tests/test_gateway_tick.py", "tests/test_alarm_sweep.py",
              "tests/test_writer_paths.py", "tests/test_store_contract.py",
              "tests/test_store_sqlite.py", "tests/test_ws_frame_order.py",
              "tests/test_hub_sockets.py", "tests/test_http_inproc.py", "tests/test_ws_inbox.py",
              "tests/test_native.py"]


def test_the_suite_runs_the_build_it_was_asked_for() -> None:
    """Compiled, unless A2H_NATIVE=0: a missing or stale build fails here instead of the
    suite passing on the interpreted modules unnoticed."""
    if os.environ.get("A2H_NATIVE") == "0":
        assert hub.BUILD.native == ()
        assert hub.BUILD.describe() == "interpreted (A2H_NATIVE=0)"
        for name in MODULES:
            assert importlib.import_module(name).__file__.endswith(".py"), name
        return
    assert hub.BUILD.native == MODULES, (
        f"the hub runs {hub.BUILD.describe()}: run scripts/setup to build the native modules")
    for name in MODULES:
        assert importlib.import_module(name).__file__.endswith(SUFFIX), name
    assert GROUP_MODULE in sys.modules


def fake_build(root: Path) -> Path:
    """A source tree with the compiled modules' sources and a matching manifest (the
    compiled files are empty stand-ins: ``plan`` only decides, it loads nothing)."""
    where = root / ".native"
    modules = {}
    for name in MODULES:
        src = source_of(root, name)
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(f"# {name}\n")
        so = Path(*name.split(".")).with_suffix(SUFFIX)
        (where / so).parent.mkdir(parents=True, exist_ok=True)
        (where / so).write_bytes(b"")
        modules[name] = {"file": str(so), "sha256": digest(src)}
    (where / f"{GROUP_MODULE}{SUFFIX}").write_bytes(b"")
    manifest = {"suffix": SUFFIX, "group": f"{GROUP_MODULE}{SUFFIX}", "modules": modules}
    (where / "manifest.json").write_text(json.dumps(manifest))
    return where


def test_a_fresh_build_is_served_module_by_module(tmp_path: Path) -> None:
    where = fake_build(tmp_path)
    files, why = plan(tmp_path, {}, SUFFIX)
    assert why == ""
    assert set(files) == {*MODULES, GROUP_MODULE}
    assert files["hub.store.rows"] == where / "hub" / "store" / f"rows{SUFFIX}"


@pytest.mark.parametrize("change, why", [
    ("edit", "the native build is stale: hub/core.py changed"),
    ("off", "A2H_NATIVE=0"),
    ("other python", "the native build is for .cpython-399-x.so, not " + SUFFIX),
    ("lost file", "the native build lacks " + f"rooms{SUFFIX}"),
    ("lost source", "hub/core.py is missing"),
    ("no build", "no native build"),
    ("torn manifest", "unreadable native manifest"),
    ("other modules", "the native build compiled other modules; rebuild it"),
])
def test_anything_but_a_fresh_build_runs_interpreted(tmp_path: Path, change: str,
                                                     why: str) -> None:
    """Each way a build can fail to match: none of it is served, and the reason says why."""
    where = fake_build(tmp_path)
    env: dict[str, str] = {}
    manifest_path = where / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if change == "edit":
        source_of(tmp_path, "hub.core").write_text("# hub.core, changed\n")
    elif change == "off":
        env["A2H_NATIVE"] = "0"
    elif change == "other python":
        manifest["suffix"] = ".cpython-399-x.so"
    elif change == "lost file":
        (where / "hub" / f"rooms{SUFFIX}").unlink()
    elif change == "lost source":
        source_of(tmp_path, "hub.core").unlink()
    elif change == "no build":
        manifest_path.unlink()
    elif change == "torn manifest":
        manifest_path.write_text('{"suffix": ')
    elif change == "other modules":
        del manifest["modules"]["hub.alarms"]
    if change in ("other python", "other modules"):
        manifest_path.write_text(json.dumps(manifest))
    files, reason = plan(tmp_path, env, SUFFIX)
    assert files == {}
    assert reason.startswith(why), reason


def test_the_build_on_disk_matches_the_source_it_was_built_from() -> None:
    """The manifest in .native/ holds the hash of each source as it is now (when the suite
    runs the compiled modules): what ran is what the tree says."""
    if os.environ.get("A2H_NATIVE") == "0":
        return  # the interpreted run checks the interpreted modules (first test)
    manifest = json.loads((ROOT / ".native" / "manifest.json").read_text())
    for name in MODULES:
        assert manifest["modules"][name]["sha256"] == digest(source_of(ROOT, name)), name
    assert _native.ROOT == ROOT


@pytest.mark.e2e
def test_the_interpreted_modules_pass_the_core_tests() -> None:
    """The same tests of the compiled modules, on the interpreted ones: both builds are the
    hub, so both must pass."""
    if os.environ.get("A2H_NATIVE") == "0":
        return  # this is that run
    env = dict(os.environ, A2H_NATIVE="0")
    out = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p",
                          "no:cacheprovider", *CORE_TESTS], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " skipped" not in out.stdout, out.stdout[-2000:]
