"""Notifications in-process: the hub (fake clock, real SQLite store) sends over real loopback
sockets to stand-ins — a webhook receiver that checks every signature with the
``standardwebhooks`` package, an ntfy topic, a push service that checks VAPID and decrypts
as a browser would. Backoff timing runs on the fake clock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest
from e2e_util import until
from notify_util import BrowserKeys, Receiver, check_vapid
from standardwebhooks.webhooks import Webhook
from test_http_inproc import BASE, Edge, edge

from hub.cli import describe_endpoint
from hub.clock import FakeClock
from hub.config import Settings
from hub.notify import ntfy
from hub.notify.events import DeliveryOutcome
from hub.notify.worker import Notifier, backoff
from hub.store import Role, Store

FAST = {"notify_min_interval": 0.0, "notify_poll": 1.0, "push_any_endpoint": True}


@contextlib.asynccontextmanager
async def hub_now(tmp_path: Path, **settings: Any) -> AsyncIterator[Edge]:
    """An in-process hub whose fake clock starts at the real time (receivers check
    ``webhook-timestamp`` and VAPID ``exp`` against their own clock)."""
    async with edge(tmp_path, **{**FAST, **settings}) as e:
        e.clock.advance(time.time() - e.clock.now())
        yield e


async def add_webhook(e: Edge, url: str, **extra: Any) -> tuple[str, str]:
    r = await e.call("POST", "/api/admin/notify", e.admin, json={"webhook": url, **extra})
    assert r.status_code == 201, r.text
    return r.json()["endpoint"]["id"], r.json()["secret"]


async def ask(e: Edge, question: str = "Deploy?", **extra: Any) -> dict[str, Any]:
    r = await e.call("POST", "/api/requests", e.agent,
                     json={"to": "me", "question": question, **extra})
    assert r.status_code == 201, r.text
    view: dict[str, Any] = r.json()["request"]
    return view


async def answer(e: Edge, op_id: str, value: Any, token: str | None = None) -> httpx.Response:
    return await e.call("POST", f"/api/requests/{op_id}/respond", token or e.human,
                        json={"value": value})


def verified(secret: str, receiver: Receiver) -> list[dict[str, Any]]:
    """Every hit's payload, each signature checked by the standardwebhooks package."""
    wh = Webhook(secret)
    return [wh.verify(h.body, h.headers) for h in receiver.hits]


async def endpoint_view(e: Edge, eid: str) -> dict[str, Any]:
    listed = (await e.call("GET", "/api/admin/notify", e.admin)).json()["endpoints"]
    [view] = [v for v in listed if v["id"] == eid]
    return dict(view)


# ---------------------------------------------------------------------------- webhooks


async def test_webhooks_are_signed_and_carry_the_request_view(tmp_path: Path) -> None:
    with Receiver() as rx:
        async with hub_now(tmp_path) as e:
            _, secret = await add_webhook(e, rx.url + "/hook")
            assert secret.startswith("whsec_")
            view = await ask(e, "Ship v2?", choices=["yes", "no"])
            assert (await answer(e, view["op_id"], "yes")).status_code == 200
            await until(lambda: len(rx.hits) >= 2, what="two webhooks")
            events = verified(secret, rx)
            assert [ev["type"] for ev in events] == ["request.created", "request.resolved"]
            assert events[0]["data"] == view
            assert events[1]["data"]["status"] == "answered"
            assert events[1]["data"]["value"] == "yes"
            assert events[1]["data"]["actor"] == "human:me"
            assert events[0]["timestamp"].endswith("Z")
            ids = [h.headers["webhook-id"] for h in rx.hits]
            assert len(set(ids)) == 2 and all(i.startswith("msg_") for i in ids)
            # A wrong secret does not verify: the check above can fail.
            with pytest.raises(Exception, match="signature"):
                Webhook("whsec_" + "A" * 32).verify(rx.hits[0].body, rx.hits[0].headers)


async def test_endpoints_per_person_hear_only_their_requests(tmp_path: Path) -> None:
    with Receiver() as rx:
        async with hub_now(tmp_path) as e:
            _, mine = await add_webhook(e, rx.url + "/me", human="me")
            _, yours = await add_webhook(e, rx.url + "/you", human="you")
            await ask(e, "for me")
            r = await e.call("POST", "/api/requests", e.agent,
                             json={"to": "you", "question": "for you"})
            assert r.status_code == 201
            await until(lambda: len(rx.hits) >= 2)
            by_path = {h.path: h for h in rx.hits}
            assert set(by_path) == {"/me", "/you"}
            assert Webhook(mine).verify(by_path["/me"].body, by_path["/me"].headers)[
                "data"]["question"] == "for me"
            assert Webhook(yours).verify(by_path["/you"].body, by_path["/you"].headers)[
                "data"]["question"] == "for you"


async def test_a_receiver_failing_three_times_gets_the_same_message_with_backoff(
        tmp_path: Path) -> None:
    with Receiver(statuses=[500, 502, 503]) as rx:
        async with hub_now(tmp_path, notify_backoff=5.0) as e:
            eid, secret = await add_webhook(e, rx.url + "/hook")
            await ask(e)
            await until(lambda: len(rx.hits) == 1)
            await until(lambda: _failing(e, eid, "HTTP 500"), what="the failure recorded")
            for n, wait in enumerate((5.0, 10.0, 20.0), start=2):
                await until(lambda: _settled(e), what="the attempt settled")
                assert backoff(n - 2, 5.0, 3600.0) == wait
                e.clock.advance(wait)
                await until(lambda n=n: len(rx.hits) == n, what=f"attempt {n}")
            await until(lambda: _delivered(e, eid), what="success recorded")
            assert len(rx.hits) == 4
            assert len({h.headers["webhook-id"] for h in rx.hits}) == 1
            assert len({h.body for h in rx.hits}) == 1
            payloads = verified(secret, rx)  # every attempt signed, with its own timestamp
            assert all(p["type"] == "request.created" for p in payloads)
            stamps = [int(h.headers["webhook-timestamp"]) for h in rx.hits]
            gaps = [b - a for a, b in zip(stamps, stamps[1:])]
            assert all(abs(g - w) <= 1 for g, w in zip(gaps, (5, 10, 20))), gaps
            view = await endpoint_view(e, eid)
            assert view["failing_since"] is None and view["last_error"] is None
            assert view["last_success_at"] is not None and view["pending"] == 0


async def _failing(e: Edge, eid: str, error: str = "HTTP 5") -> bool:
    view = await endpoint_view(e, eid)
    return view["failing_since"] is not None and error in (view["last_error"] or "")


async def _delivered(e: Edge, eid: str) -> bool:
    return (await endpoint_view(e, eid))["last_success_at"] is not None


async def test_an_endpoint_failing_for_a_day_is_disabled_and_says_why(tmp_path: Path) -> None:
    with Receiver(default=503) as rx:
        async with hub_now(tmp_path, notify_backoff=600.0, notify_backoff_max=3600.0) as e:
            eid, _ = await add_webhook(e, rx.url + "/hook")
            await ask(e, expires_in=3 * 86400)
            await until(lambda: _failing(e, eid))
            day = 86400.0
            for _ in range(60):  # hour by hour (backoff capped at one), through the day
                if (await endpoint_view(e, eid))["disabled_at"] is not None:
                    break
                before = len(rx.hits)
                e.clock.advance(3600.0)
                await until(lambda b=before: len(rx.hits) > b
                            or _disabled_now(e, eid), what="another attempt")
                await until(lambda: _settled(e))
            view = await endpoint_view(e, eid)
            assert view["disabled_at"] is not None
            assert view["disabled_at"] - view["failing_since"] >= day
            assert "HTTP 503" in view["disabled_reason"] and "failed since" in \
                view["disabled_reason"]
            assert view["pending"] == 0
            line = describe_endpoint(view)
            assert "DISABLED" in line and "HTTP 503" in line
            # Disabled: nothing new is written for it, nothing is sent.
            hits = len(rx.hits)
            await ask(e)
            e.clock.advance(3600.0)
            assert (await endpoint_view(e, eid))["pending"] == 0
            assert len(rx.hits) == hits


async def _disabled_now(e: Edge, eid: str) -> bool:
    return (await endpoint_view(e, eid))["disabled_at"] is not None


def _settled(e: Edge) -> bool:
    return e.hub.notifier.statistics()["sending"] == 0


async def test_a_hanging_receiver_delays_no_ask_and_no_answer(tmp_path: Path) -> None:
    with Receiver(hang=True) as rx:
        async with hub_now(tmp_path, notify_concurrency=2, notify_timeout=60.0) as e:
            await add_webhook(e, rx.url + "/hook")
            await add_webhook(e, rx.url + "/hook2")
            start = time.monotonic()
            for i in range(20):
                view = await ask(e, f"q{i}")
                assert (await answer(e, view["op_id"], "ok")).status_code == 200
            took = time.monotonic() - start
            await until(lambda: rx.hanging == 2, what="sends stuck in the receiver")
            # 40 asks and answers, 80 deliveries waiting behind two stuck sends: the hub
            # answered everything anyway, and never sends more than its concurrency.
            assert took < 10.0, took
            assert rx.hanging == 2 and len(rx.hits) == 2
            stats = e.hub.notifier.statistics()
            assert stats["sending"] <= 4 * 2


# ---------------------------------------------------------------------------- ntfy


async def test_ntfy_gets_a_title_the_question_and_a_click_to_the_item(tmp_path: Path) -> None:
    with Receiver() as rx:
        async with hub_now(tmp_path, public_url="https://hub.example") as e:
            r = await e.call("POST", "/api/admin/notify", e.admin,
                             json={"ntfy": rx.url + "/my-topic", "token": "tk_1"})
            assert r.status_code == 201 and "secret" not in r.json()
            view = await ask(e, "Can I drop the **staging** table? ✓",
                             kind="approval")
            await until(lambda: len(rx.hits) == 1)
            await answer(e, view["op_id"], {"approved": True, "comment": ""})
            hit = rx.hits[0]
            assert hit.path == "/my-topic"
            assert hit.body.decode() == "Can I drop the **staging** table? ✓"
            assert hit.headers["title"] == "Approval from agent:bot"
            link = f"https://hub.example/#item={view['op_id']}"
            assert hit.headers["click"] == link
            assert hit.headers["actions"] == f"view, Open in the inbox, {link}, clear=true"
            assert hit.headers["authorization"] == "Bearer tk_1"
            assert len(rx.hits) == 1  # resolutions are not sent to ntfy


def test_ntfy_encodes_a_title_that_is_not_ascii() -> None:
    body = orjson.dumps({"type": "request.created", "timestamp": "x",
                         "data": {"op_id": "o", "kind": "question", "from": "agent:ロボ",
                                  "question": "q"}})
    headers, _ = ntfy.message(body, "http://h", None)
    assert headers["title"].startswith("=?UTF-8?B?")
    assert "authorization" not in headers


# ---------------------------------------------------------------------------- admin API


@pytest.mark.parametrize("body, param", [
    ({}, "webhook"),
    ({"webhook": "ftp://x/y"}, "webhook"),
    ({"webhook": "http://user:pw@x/y"}, "webhook"),
    ({"webhook": "http://x/y", "ntfy": "http://x/z"}, "webhook"),
    ({"ntfy": "http://x/z", "token": 3}, "token"),
    ({"webhook": "http://x/y", "human": "a b"}, "human"),
    ({"webhook": "http://x/y", "events": []}, "events"),
])
async def test_admin_notify_refuses_bad_bodies_naming_the_field(tmp_path: Path,
                                                               body: dict[str, Any],
                                                               param: str) -> None:
    async with edge(tmp_path) as e:
        r = await e.call("POST", "/api/admin/notify", e.admin, json=body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param


async def test_admin_notify_is_per_tenant_and_for_admins_only(tmp_path: Path) -> None:
    async with edge(tmp_path) as e:
        eid, _ = await add_webhook(e, "http://127.0.0.1:9/hook")
        assert (await e.call("GET", "/api/admin/notify", e.agent)).status_code == 403
        assert (await e.call("POST", "/api/admin/notify", e.human,
                             json={"webhook": "http://x/y"})).status_code == 403
        other_admin = await e.hub.store.create_token("other", Role.ADMIN, "root2")
        assert (await e.call("GET", "/api/admin/notify", other_admin)).json() == \
            {"endpoints": []}
        assert (await e.call("DELETE", f"/api/admin/notify/{eid}",
                             other_admin)).status_code == 404
        listed = (await e.call("GET", "/api/admin/notify", e.admin)).json()["endpoints"]
        assert [v["id"] for v in listed] == [eid] and "secret" not in listed[0]
        assert (await e.call("DELETE", f"/api/admin/notify/{eid}", e.admin)).status_code == 204
        assert (await e.call("GET", "/api/admin/notify", e.admin)).json() == {"endpoints": []}


# ---------------------------------------------------------------------------- Web Push


async def subscribe(e: Edge, endpoint: str, keys: BrowserKeys,
                    token: str | None = None) -> str:
    r = await e.call("POST", "/api/push/subscriptions", token or e.human,
                     json=keys.subscription(endpoint))
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_a_push_is_signed_with_the_hubs_vapid_key_and_decrypts_in_the_browser(
        tmp_path: Path) -> None:
    keys = BrowserKeys()
    with Receiver(statuses=[201]) as push:  # what push services answer
        async with hub_now(tmp_path) as e:
            public = (await e.call("GET", "/api/push/key", e.human)).json()["public_key"]
            await subscribe(e, push.url + "/push/abc", keys)
            view = await ask(e, "Merge the PR?", kind="approval")
            await until(lambda: len(push.hits) == 1, what="the push")
            hit = push.hits[0]
            assert check_vapid(hit.headers["authorization"], push.url, time.time()) == public
            assert hit.headers["content-encoding"] == "aes128gcm"
            assert int(hit.headers["ttl"]) > 0
            message = keys.decrypt(hit.body)
            assert message["type"] == "request" and message["op_id"] == view["op_id"]
            assert message["title"] == "Approval from agent:bot"
            assert message["body"] == "Merge the PR?"
            assert message["url"] == f"/#item={view['op_id']}"
            assert [(a["action"], a["answer"]["status"]) for a in message["actions"]] == [
                ("approve", "answered"), ("reject", "declined")]
            import http_ece

            with pytest.raises(http_ece.ECEException):  # another browser's keys cannot
                BrowserKeys().decrypt(hit.body)
        # The key is the store's: the same after a restart.
        async with edge(tmp_path, **FAST) as e2:
            again = (await e2.call("GET", "/api/push/key", e2.human)).json()["public_key"]
            assert again == public


async def test_a_question_with_two_choices_carries_them_as_actions(tmp_path: Path) -> None:
    keys = BrowserKeys()
    with Receiver() as push:
        async with hub_now(tmp_path) as e:
            await subscribe(e, push.url + "/p", keys)
            await ask(e, "Which region?", choices=["eu-west", "us-east"])
            await until(lambda: len(push.hits) == 1)
            actions = keys.decrypt(push.hits[0].body)["actions"]
            assert [(a["title"], a["answer"]) for a in actions] == [
                ("eu-west", {"status": "answered", "value": "eu-west"}),
                ("us-east", {"status": "answered", "value": "us-east"})]


async def test_nothing_is_pushed_for_a_request_resolved_before_the_send(tmp_path: Path) -> None:
    keys = BrowserKeys()
    with Receiver() as push:
        # The sender looks only when the fake clock moves: the answer lands first.
        async with hub_now(tmp_path, notify_min_interval=1.0) as e:
            await until(lambda: e.clock.sleepers > 0)
            await subscribe(e, push.url + "/p", keys)
            view = await ask(e, "too late")
            assert (await answer(e, view["op_id"], "done")).status_code == 200
            e.clock.advance(1.0)
            await until(lambda: e.hub.notifier.skipped == 1, what="the push skipped")
            assert push.hits == []


async def test_several_new_requests_become_one_summary(tmp_path: Path) -> None:
    keys = BrowserKeys()
    with Receiver() as push:
        async with hub_now(tmp_path, push_coalesce=3.0) as e:
            await subscribe(e, push.url + "/p", keys)
            await ask(e, "first")
            await until(lambda: len(push.hits) == 1)
            for q in ("second", "third", "fourth"):
                await ask(e, q)
            await until(lambda: e.hub.notifier.statistics()["sending"] == 0
                        and _postponed(e, 3))
            e.clock.advance(3.0)
            await until(lambda: len(push.hits) == 2, what="the summary")
            first, summary = (keys.decrypt(h.body) for h in push.hits)
            assert first["type"] == "request" and first["body"] == "first"
            assert summary["type"] == "summary" and summary["count"] == 3
            assert summary["title"] == "3 new requests"
            assert summary["body"].splitlines() == ["second", "third", "fourth"]
            assert summary["url"] == "/"


async def _postponed(e: Edge, n: int) -> bool:
    [sub] = await e.hub.store.list_endpoints("default", human="me")
    return sub.pending == n


async def test_a_subscription_the_push_service_reports_gone_is_deleted(tmp_path: Path) -> None:
    keys = BrowserKeys()
    with Receiver(statuses=[410]) as push:
        async with hub_now(tmp_path) as e:
            await subscribe(e, push.url + "/gone", keys)
            await ask(e, "anyone?")
            await until(lambda: len(push.hits) == 1)
            await until(lambda: _no_subscription(e), what="the subscription deleted")


async def _no_subscription(e: Edge) -> bool:
    return await e.hub.store.list_endpoints("default", human="me") == []


async def test_push_subscriptions_are_a_persons_own(tmp_path: Path) -> None:
    keys = BrowserKeys()
    async with edge(tmp_path) as e:
        sub = keys.subscription("https://push.example/1")
        assert (await e.call("POST", "/api/push/subscriptions", e.agent,
                             json=sub)).status_code == 403
        async with e.client() as http:  # the page's way: the session cookie
            r = await http.post("/api/session", json={"token": e.human},
                                headers={"origin": BASE})
            assert r.status_code == 204
            r = await http.post("/api/push/subscriptions", json=sub,
                                headers={"origin": "https://evil.example"})
            assert r.status_code == 403  # a cross-site request riding the cookie is refused
            r = await http.post("/api/push/subscriptions", json=sub, headers={"origin": BASE})
            assert r.status_code == 201, r.text
        first = await subscribe(e, sub["endpoint"], keys)
        assert await subscribe(e, sub["endpoint"], keys) == first  # same browser: same row
        bad = {"endpoint": "https://push.example/2", "keys": {"p256dh": "!!", "auth": "x"}}
        r = await e.call("POST", "/api/push/subscriptions", e.human, json=bad)
        assert r.status_code == 400 and r.json()["error"]["param"] == "keys"
        r = await e.call("DELETE", "/api/push/subscriptions", e.human2,
                         json={"endpoint": sub["endpoint"]})
        assert r.status_code == 404  # not yours
        r = await e.call("DELETE", "/api/push/subscriptions", e.human,
                         json={"endpoint": sub["endpoint"]})
        assert r.status_code == 204
        assert await e.hub.store.list_endpoints("default") == []


async def test_the_clock_passing_the_next_look_during_a_look_brings_it_now() -> None:
    """The next look is due a poll after the last one read the clock, not a poll after the
    store answered: when the clock passes it meanwhile (a slow store, or a test moving the
    fake clock mid-look), the worker looks again at once rather than a whole poll later."""
    clock = FakeClock()
    looks: list[float] = []

    class Outbox:
        async def release_deliveries(self) -> None:
            return None

        async def claim_deliveries(self, now: float, lease: float, limit: int) -> list[Any]:
            looks.append(now)
            if len(looks) == 1:
                clock.advance(3600.0)  # the clock moves while this look is in the store
            return []

    worker = Notifier(cast(Store, Outbox()), clock, Settings(notify_poll=1.0,
                                                             notify_min_interval=0.0))
    await worker.start()
    try:
        await until(lambda: len(looks) >= 2, what="a second look without moving the clock")
        assert looks[:2] == [clock.now() - 3600.0, clock.now()]
        await until(lambda: clock.sleepers == 1, what="the worker parked on its poll timer")
        assert len(looks) == 2  # and then it waits a poll, it does not spin
    finally:
        await worker.stop()


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff(n, 5.0, 60.0) for n in range(6)] == [5, 10, 20, 40, 60, 60]
    assert backoff(10_000, 5.0, 3600.0) == 3600.0
    assert DeliveryOutcome.RETRY.value == "retry"



async def test_browsers_may_register_only_push_services(tmp_path: Path) -> None:
    keys = BrowserKeys()
    async with edge(tmp_path) as e:  # the default: push_any_endpoint off
        for url in ("http://push.example/1", "https://127.0.0.1/x", "https://10.0.0.5/x",
                    "https://localhost/x", "https://[::1]/x", "https://metadata.internal/x",
                    "https://intranet/x"):
            r = await e.call("POST", "/api/push/subscriptions", e.human,
                             json=keys.subscription(url))
            assert r.status_code == 400 and r.json()["error"]["param"] == "endpoint", url
        ok = await e.call("POST", "/api/push/subscriptions", e.human,
                          json=keys.subscription("https://fcm.googleapis.com/fcm/send/abc"))
        assert ok.status_code == 201
