"""The hub as a user installs it: a wheel in a clean virtual environment serves the full inbox.

The wheel is built from this tree (``pip wheel``), installed (not editable) into a new venv in a
temp dir, and its own ``a2h serve`` runs from an unrelated directory, so nothing can come from
the source tree. Works offline: the runtime dependencies are installed with ``--no-index`` from
wheels repacked from this venv's installed copies (the same versions the rest of the suite
runs on). Only building the a2h-hub wheel uses pip's configured index, for the build backend,
as ``scripts/setup`` does.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from browser_util import ROOT, ms, playwright_expect
from e2e_util import UNIT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
expect = playwright_expect()

DIST = "a2h-hub"
WEB = ROOT / "hub" / "web"
#: What a copy of the tree to build from leaves out (local state, never part of a wheel).
NOT_SOURCE = (".git", ".venv", "build", "*.egg-info", "__pycache__", "*_cache", ".benchmarks",
              "artifacts", "results", "*.db", "*.db-wal", "*.db-shm")


# ---------------------------------------------------------------------------- wheels


def dependency_closure(dist: str) -> set[str]:
    """The installed distributions ``dist`` needs at run time on this interpreter, recursively
    (markers and extras such as ``uvicorn[standard]`` evaluated), ``dist`` itself excluded."""
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(dist, "")]
    while todo:
        name, extra = todo.pop()
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": extra}):
                continue
            for wanted in ("", *sorted(req.extras)):
                if (key := (canonicalize_name(req.name), wanted)) not in seen:
                    seen.add(key)
                    todo.append((req.name, wanted))
    return {name for name, _ in seen} - {canonicalize_name(dist)}


def repack_installed(name: str, out: Path) -> Path:
    """A wheel of the installed distribution ``name``, rebuilt from the files its RECORD lists
    (bytecode and generated scripts left out: the installer makes those again)."""
    dist = metadata.distribution(name)
    tags = [v.strip() for k, _, v in (line.partition(":") for line in
            (dist.read_text("WHEEL") or "").splitlines()) if k == "Tag"]
    assert tags, f"{name}: no Tag in its WHEEL file"
    stem = f"{canonicalize_name(dist.metadata['Name']).replace('-', '_')}-{dist.version}"
    path = out / f"{stem}-{tags[0]}.whl"
    record_name = ""
    rows: list[str] = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for f in dist.files or []:
            arc = f.as_posix()
            if arc.startswith("..") or "__pycache__" in f.parts or arc.endswith(".pyc"):
                continue
            if f.name == "RECORD" and f.parent.name.endswith(".dist-info"):
                record_name = arc
                continue
            data = Path(str(dist.locate_file(f))).read_bytes()
            zf.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            rows.append(f"{arc},sha256={digest.decode()},{len(data)}")
        assert record_name, f"{name}: no RECORD"
        rows.append(f"{record_name},,")
        zf.writestr(record_name, "\n".join(rows) + "\n")
    return path


@dataclass
class Installed:
    wheel: Path
    venv: Path
    seconds: float

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Build the wheel, then install it into a clean venv with its dependencies, offline."""
    start = time.monotonic()
    tmp = tmp_path_factory.mktemp("wheel")
    dist, house, venv = tmp / "dist", tmp / "house", tmp / "venv"
    house.mkdir()
    # Built from a copy: setuptools builds in the tree and would reuse a stale build/ there,
    # hiding a file that package-data misses.
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist),
                    str(src)], check=True, capture_output=True, timeout=300 * UNIT)
    (wheel,) = dist.glob("a2h_hub-*.whl")
    for name in sorted(dependency_closure(DIST)):
        repack_installed(name, house)
    # No pip inside the new venv: this interpreter's pip installs into it (--python).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120 * UNIT)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--no-index", "--find-links", str(house), str(wheel)],
                   check=True, capture_output=True, timeout=300 * UNIT)
    return Installed(wheel, venv, time.monotonic() - start)


def clean_env() -> dict[str, str]:
    """This process's environment without anything that could point back at the source tree."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("A2H_", "PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


# ---------------------------------------------------------------------------- the hub


@dataclass
class Served:
    url: str
    login: str
    agent_token: str


@pytest.fixture(scope="module")
def served(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The installed venv's ``a2h serve`` on port 0, run from an unrelated directory."""
    cwd = tmp_path_factory.mktemp("elsewhere")
    proc = subprocess.Popen([installed.bin("a2h"), "serve", "--port", "0", "--db",
                             str(cwd / "hub.db")], cwd=cwd, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    up = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "a2h: serving on" in line:
                up.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 30 * UNIT
    try:
        while not up.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the installed a2h serve did not start:\n" + "".join(lines))
        out = "".join(lines)
        login = re.search(r"(http://\S+/#token=\S+)", out)
        agent = re.search(r"^\s+(a2h_ag_\S+)$", out, re.M)
        url = re.search(r"a2h: serving on (http://\S+)", out)
        assert login and agent and url, out
        yield Served(url.group(1), login.group(1), agent.group(1))
    finally:
        proc.terminate()
        try:
            proc.wait(10 * UNIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------- tests


def test_the_wheel_carries_every_file_of_the_inbox(installed: Installed) -> None:
    shipped = set(zipfile.ZipFile(installed.wheel).namelist())
    files = sorted(p.relative_to(ROOT).as_posix() for p in WEB.rglob("*") if p.is_file())
    assert "hub/web/index.html" in files
    assert [f for f in files if f not in shipped] == []


def test_version_comes_from_pyproject(installed: Installed, tmp_path: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    r = subprocess.run([installed.bin("a2h"), "--version"], cwd=tmp_path, env=clean_env(),
                       capture_output=True, text=True, check=True, timeout=60 * UNIT)
    assert r.stdout.strip() == f"a2h {version}"
    where = subprocess.run([installed.bin("python"), "-c", "import hub; print(hub.__file__)"],
                           cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                           check=True, timeout=60 * UNIT).stdout.strip()
    assert Path(where).is_relative_to(installed.venv), where  # not the source tree


def test_the_installed_hub_serves_the_inbox_to_chromium(
        installed: Installed, served: Served, context: Any, tmp_path: Path) -> None:
    page = context.new_page()
    page.goto(served.login)
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    expect(page.locator("#whoami")).to_have_text("Signed in as me")
    expect(page).to_have_title("A2H Inbox")

    # The wheel's own CLI asks as the agent; the person answers in the page.
    env = clean_env() | {"A2H_URL": served.url, "A2H_TOKEN": served.agent_token}
    ask = subprocess.Popen([installed.bin("a2h"), "ask", "--to", "me", "Ship the wheel?",
                            "--choices", "yes,no", "--wait", str(30 * UNIT)], cwd=tmp_path,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        item = page.get_by_role("article", name=re.compile("Ship the wheel"))
        expect(item).to_be_visible(timeout=ms(15))
        item.get_by_role("button", name="yes", exact=True).click()
        out, err = ask.communicate(timeout=30 * UNIT)
    finally:
        if ask.poll() is None:
            ask.kill()
            ask.wait()
    assert (ask.returncode, out.strip()) == (0, "yes"), err
    expect(item).to_contain_text("Accepted")
