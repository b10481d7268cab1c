"""A2H hub: agents ask, humans answer. See docs/design.md for the module map."""

__version__ = "0.1.0"
