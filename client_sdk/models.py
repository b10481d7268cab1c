"""What the SDK hands back: answers and inbox items, decoded once from request views."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hub.protocol import Status


@dataclass(frozen=True)
class Answer:
    """The outcome of an ask (or of a wait on one).

    ``status`` is ``answered``, ``declined``, ``expired``, ``cancelled`` or ``pending``
    (the wait ran out first; call ``Hub.wait(op_id)`` to re-attach).

    ``value`` is the answer as JSON — or, for an ask with ``schema=SomeModel`` that was
    answered, a ``SomeModel`` instance (``request["value"]`` keeps the JSON).
    """

    status: str
    op_id: str
    value: Any = None
    actor: str | None = None
    human_seconds: float | None = None
    answered_at: float | None = None
    request: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def pending(self) -> bool:
        return self.status == Status.PENDING

    @property
    def approved(self) -> bool:
        """For approvals: True when a human approved."""
        return self.status == Status.ANSWERED and isinstance(self.value, dict) and \
            bool(self.value.get("approved"))

    @property
    def comment(self) -> str:
        if isinstance(self.value, dict):
            return str(self.value.get("comment") or "")
        return ""

    @classmethod
    def from_view(cls, view: dict[str, Any]) -> Answer:
        return cls(status=view["status"], op_id=view["op_id"], value=view.get("value"),
                   actor=view.get("actor"), human_seconds=view.get("human_seconds"),
                   answered_at=view.get("resolved_at"), request=view)


@dataclass(frozen=True)
class Item:
    """A request as a human sees it in the inbox."""

    op_id: str
    question: str
    kind: str
    conversation: str
    sender: str
    choices: list[str] | None
    context: Any
    deadline: float
    created_at: float
    status: str
    request: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_view(cls, view: dict[str, Any]) -> Item:
        return cls(op_id=view["op_id"], question=view["question"], kind=view["kind"],
                   conversation=view["conversation"], sender=view["from"],
                   choices=view.get("choices"), context=view.get("context"),
                   deadline=view["deadline"], created_at=view["created_at"],
                   status=view["status"], request=view)
