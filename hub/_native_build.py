"""Builds the native modules (:mod:`hub._native`): ``python -m hub._native_build
[--if-stale]``. A build tool, not part of the running hub: it needs the ``native`` extra
(mypy, which ships mypyc, and setuptools) and a C compiler.

The build goes to a scratch directory first and replaces ``.native/`` only when it is
complete, so a failed or interrupted build leaves the previous one (or none) in place.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import sys
import warnings
from pathlib import Path

from hub._native import (
    DIR_NAME,
    GROUP,
    GROUP_MODULE,
    MANIFEST,
    MODULES,
    ROOT,
    digest,
    plan,
    source_of,
)


def build(root: Path = ROOT, *, if_stale: bool = False) -> str:
    """Compile :data:`MODULES` with mypyc into ``root/.native`` (replacing what is there);
    with ``if_stale``, only when the build there is not fresh. Returns what it did."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    if if_stale:
        files, _ = plan(root, {}, suffix)
        if files:
            return "the native build is fresh"
    # Build-time tools: the ``native`` extra (mypy, which ships mypyc, and setuptools).
    from mypyc.build import mypycify
    from setuptools import setup  # type: ignore[import-untyped]

    sources = {m: source_of(root, m) for m in MODULES}
    hashes = {m: digest(p) for m, p in sources.items()}
    work = root / f"{DIR_NAME}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    here = Path.cwd()
    os.chdir(root)  # mypyc names the modules by their paths from here
    try:
        # The modules the compiled ones import are type-checked but not reported on: the
        # optional extras (mcp, aiohttp, ...) need not be installed for a build; the suite's
        # mypy --strict checks the whole package where they are.
        exts = mypycify(["--follow-imports=silent",
                         *(str(p.relative_to(root)) for p in sources.values())],
                        opt_level="3", target_dir=str(work / "c"), group_name=GROUP)
        with warnings.catch_warnings():  # setuptools reads pyproject.toml's [tool.setuptools]
            warnings.simplefilter("ignore")
            setup(name="a2h-native", ext_modules=exts, packages=[],
                  script_args=["-q", "build_ext", "--build-lib", str(work / "lib"),
                               "--build-temp", str(work / "obj")])
    finally:
        os.chdir(here)
    lib = work / "lib"
    manifest = {
        "suffix": suffix,
        "group": f"{GROUP_MODULE}{suffix}",
        "modules": {m: {"file": str(Path(*m.split(".")).with_suffix(suffix)),
                        "sha256": hashes[m]} for m in MODULES},
    }
    (lib / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    target = root / DIR_NAME
    old = root / f"{DIR_NAME}.old-{os.getpid()}"
    if target.exists():
        target.rename(old)
    lib.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    return f"built {len(MODULES)} modules into {target}"


def main(argv: list[str]) -> int:
    if argv not in ([], ["--if-stale"]):
        print("usage: python -m hub._native_build [--if-stale]", file=sys.stderr)
        return 2
    print(f"hub._native_build: {build(if_stale=argv == ['--if-stale'])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
