"""Python SDK for the A2H hub: agents ask, humans answer.

    async with Hub("http://127.0.0.1:8000", token=AGENT_TOKEN) as hub:
        answer = await hub.ask("me", "Deploy now?", conversation="deploys",
                               choices=["yes", "no"])

From a script or a notebook, without an event loop::

    with SyncHub("http://127.0.0.1:8000", token=AGENT_TOKEN) as hub:
        answer = hub.ask("me", "Deploy now?", conversation="deploys", choices=["yes", "no"])
"""

from client_sdk.client import Hub, new_op_id
from client_sdk.errors import (
    A2HError,
    AccessDenied,
    AlreadyResolved,
    Conflict,
    ConnectionLost,
    InvalidRequest,
    LimitExceeded,
    NotFound,
    Overloaded,
    RateLimited,
    RequestError,
    RetryableError,
    UnknownOutcome,
)
from client_sdk.models import Answer, Item
from client_sdk.runs import (
    CallFailed,
    Rejected,
    ReplayDivergence,
    Run,
    RunInfo,
    RunNotActive,
    RunVersionChanged,
    call_id,
)
from client_sdk.sync import SyncHub, SyncRun

__all__ = [
    "A2HError",
    "AccessDenied",
    "AlreadyResolved",
    "Answer",
    "CallFailed",
    "Conflict",
    "ConnectionLost",
    "Hub",
    "InvalidRequest",
    "Item",
    "LimitExceeded",
    "NotFound",
    "Overloaded",
    "RateLimited",
    "Rejected",
    "ReplayDivergence",
    "RequestError",
    "RetryableError",
    "Run",
    "RunInfo",
    "RunNotActive",
    "RunVersionChanged",
    "SyncHub",
    "SyncRun",
    "UnknownOutcome",
    "call_id",
    "new_op_id",
]
