"""The native build: the hub's hot modules compiled with mypyc, used only when they are what
the source says.

``python -m hub._native_build`` (``scripts/setup`` runs it) compiles :data:`MODULES` into
``.native/`` at the root of the source tree, with ``manifest.json``: the interpreter it was
built for, the group library, and for each module its compiled file and the SHA-256 of the
source it was built from. The package's ``__init__`` calls :func:`load` before anything
else of the hub is imported. :func:`load` puts a finder in front of ``sys.meta_path`` that
serves those modules from ``.native/``, but only when

- ``A2H_NATIVE`` is not ``0``,
- the manifest was written for this interpreter (its extension suffix), and
- every module's source still has the hash the build recorded.

Otherwise the hub runs as interpreted Python: the same program, slower. The modules are
compiled as one group that calls across itself directly, so they are used all together or
not at all. The compiled set is chosen so that nothing subclasses a compiled class at run
time (Python may not): the error types (:mod:`hub.errors`) and the clocks (:mod:`hub.clock`,
which the tests subclass) stay interpreted.

Standard library only, and no hub import: this runs while ``hub`` is being imported.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

#: The modules compiled: a cycle's path through the hub (socket session → frames → gateway →
#: service → room → core → SQLite store and its writer thread → rows → alarms).
MODULES = ("hub.server.ws", "hub.protocol", "hub.gateway", "hub.service", "hub.rooms", "hub.core",
           "hub.store.sqlite", "hub.store.rows", "hub.alarms")
#: mypyc's group library: the compiled code of every module above (each module's own file
#: is a shim that imports it).
GROUP = "a2h_native"
#: ... and the name its shims import it by.
GROUP_MODULE = f"{GROUP}__mypyc"
#: Where the build goes: beside the package, at the root of a source checkout.
ROOT = Path(__file__).resolve().parent.parent
DIR_NAME = ".native"
MANIFEST = "manifest.json"
#: ``A2H_NATIVE=0`` runs the interpreted modules even when a fresh build is there.
ENV = "A2H_NATIVE"


@dataclass(frozen=True, slots=True)
class State:
    """What :func:`load` decided: ``native`` lists the modules served compiled (empty when
    the hub runs interpreted), ``why`` says why in a few words."""

    native: tuple[str, ...]
    why: str

    def describe(self) -> str:
        if self.native:
            return f"native ({len(self.native)} modules compiled with mypyc)"
        return f"interpreted ({self.why})"


def source_of(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def plan(root: Path, env: Mapping[str, str], suffix: str) -> tuple[dict[str, Path], str]:
    """The compiled files to serve (module name → file; empty for none) and why.

    Pure but for reading files: ``root`` is the source tree, ``suffix`` this interpreter's
    extension suffix (``importlib.machinery.EXTENSION_SUFFIXES[0]``)."""
    if env.get(ENV, "") == "0":
        return {}, f"{ENV}=0"
    where = root / DIR_NAME
    try:
        manifest = json.loads((where / MANIFEST).read_text("utf-8"))
    except FileNotFoundError:
        return {}, "no native build"
    except (OSError, ValueError) as exc:
        return {}, f"unreadable native manifest: {exc}"
    if manifest.get("suffix") != suffix:
        return {}, f"the native build is for {manifest.get('suffix')}, not {suffix}"
    built: dict[str, dict[str, str]] = manifest.get("modules", {})
    if sorted(built) != sorted(MODULES):
        return {}, "the native build compiled other modules; rebuild it"
    files: dict[str, Path] = {}
    for module in MODULES:
        source = source_of(root, module)
        try:
            if digest(source) != built[module]["sha256"]:
                return {}, f"the native build is stale: {source.relative_to(root)} changed"
        except FileNotFoundError:
            return {}, f"{source.relative_to(root)} is missing"
        files[module] = where / built[module]["file"]
    files[GROUP_MODULE] = where / manifest["group"]
    for path in files.values():
        if not path.exists():
            return {}, f"the native build lacks {path.name}"
    return files, ""


class _Finder(importlib.abc.MetaPathFinder):
    """Serves each compiled module (and the group library) from its file."""

    def __init__(self, files: dict[str, Path]) -> None:
        self._files = files

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        file = self._files.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(fullname, file)


def load() -> State:
    """Decide once, when ``hub`` is imported, and install the finder if the build is fresh."""
    loaded = [m for m in MODULES if m in sys.modules]
    if loaded:  # imported before the hub package itself: too late to choose
        return State((), f"{loaded[0]} was imported before hub")
    files, why = plan(ROOT, os.environ, importlib.machinery.EXTENSION_SUFFIXES[0])
    if not files:
        return State((), why)
    sys.meta_path.insert(0, _Finder(files))
    return State(MODULES, "")
