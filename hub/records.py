"""Records: the hub's immutable data (frames, events, store ops, effects, wake-ups).

``@record`` is ``@dataclass(frozen=True, slots=True)`` to the type checker, and
``@dataclass(slots=True, unsafe_hash=True)`` when the program runs: the same fields,
equality, hash and repr. Nothing assigns to a record's field: mypy --strict, which the test
suite runs over the whole package, rejects it as it would for a frozen dataclass.

Why not ``frozen=True`` at run time too: a frozen dataclass's ``__init__`` sets each field
through ``object.__setattr__``, a call of its own. One ask → answer cycle builds about a
dozen records (the frames, the events, the store ops, the replies and effects), and those
calls were about 6 % of the instructions the hub spends on a cycle (``python -m
bench.instructions``, docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    return dataclass(slots=True, unsafe_hash=True)(cls)
