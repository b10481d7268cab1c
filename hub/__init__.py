"""A2H hub: agents ask, humans answer. See docs/design.md for the module map."""

from hub import _native

#: Whether the hot modules run compiled (``.native/``, fresh) or interpreted, and why: decided
#: here, before any of them is imported (:mod:`hub._native`).
BUILD = _native.load()


def __getattr__(name: str) -> str:
    # ``hub.__version__`` is the installed distribution's version: pyproject.toml is the one
    # source of truth. Looked up on first use, so importing the hub (or the SDK, which
    # imports hub.protocol) does not pay for importlib.metadata.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("a2h-hub")
        except PackageNotFoundError:  # pragma: no cover - a source tree never installed
            return "0+unknown"
    raise AttributeError(f"module 'hub' has no attribute {name!r}")
