"""Web Push subscriptions of the signed-in person (the inbox's "Enable notifications").

    GET    /api/push/key            -> {"public_key": "<VAPID key, base64url>"}
    POST   /api/push/subscriptions  PushSubscription.toJSON() -> 201 {"id": "..."}
    DELETE /api/push/subscriptions  {"endpoint": "..."}       -> 204 | 404

Humans only, by the session cookie (or a human bearer token), under the page's rules: a
state-changing call from another site is refused (Origin / Sec-Fetch-Site). A person holds
at most ``MAX_PUSH_PER_HUMAN`` subscriptions; subscribing the same browser again replaces
its keys.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hub.errors import Invalid, LimitExceeded, NotFound, RetryLater
from hub.notify import endpoints
from hub.notify.events import Channel
from hub.server.auth import authenticate, hub_of
from hub.server.bodies import read_object
from hub.server.errors import endpoint
from hub.store import Role

MAX_BODY = 8192


@endpoint
async def key(request: Request) -> Response:
    await authenticate(request, Role.HUMAN)
    try:
        vapid = await hub_of(request).notifier.vapid()
    except ImportError:
        raise RetryLater("Web Push needs the notify extra on the hub: "
                         "pip install 'a2h-hub[notify]'") from None
    return JSONResponse({"public_key": vapid.public_key})


@endpoint
async def subscribe(request: Request) -> Response:
    who = await authenticate(request, Role.HUMAN, state_changing=True)
    hub = hub_of(request)
    body = await read_object(request, MAX_BODY)
    sub = endpoints.push_subscription(who.tenant, who.name, body, hub.clock.now())
    if not hub.settings.push_any_endpoint:
        endpoints.check_push_service(sub.url)
    mine = await hub.store.list_endpoints(who.tenant, human=who.name, channel=Channel.PUSH)
    if len(mine) >= endpoints.MAX_PUSH_PER_HUMAN and all(e.url != sub.url for e in mine):
        raise LimitExceeded(f"at most {endpoints.MAX_PUSH_PER_HUMAN} browsers per person get "
                            "notifications: turn them off in one you no longer use")
    stored = await hub.store.add_endpoint(sub)
    return JSONResponse({"id": stored.id}, status_code=201)


@endpoint
async def unsubscribe(request: Request) -> Response:
    who = await authenticate(request, Role.HUMAN, state_changing=True)
    hub = hub_of(request)
    body = await read_object(request, MAX_BODY)
    url = body.get("endpoint")
    if not isinstance(url, str):
        raise Invalid('send {"endpoint": "<the subscription\'s endpoint>"}', param="endpoint")
    for sub in await hub.store.list_endpoints(who.tenant, human=who.name, channel=Channel.PUSH):
        if sub.url == url:
            await hub.store.remove_endpoint(sub.id, tenant=who.tenant, human=who.name)
            return Response(status_code=204)
    raise NotFound("no such subscription of yours")


def routes() -> list[Route]:
    return [
        Route("/api/push/key", key, methods=["GET"]),
        Route("/api/push/subscriptions", subscribe, methods=["POST"]),
        Route("/api/push/subscriptions", unsubscribe, methods=["DELETE"]),
    ]
