"""What the human sees while an answer is on its way, and when it loses a race.

Playwright sits between the page and the hub (``page.route_web_socket``), so a test can hold
the page's ``respond`` frame (to see the progress) or drop the hub's ``inbox.remove`` push (so
the page still shows a request someone else already resolved) — deterministically, no timing.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest
from browser_util import Human, SdkClient, ms, playwright_expect
from e2e_util import HubProcess

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
expect = playwright_expect()


class Relay:
    """Forwards every frame between page and hub, except what the test holds or drops."""

    def __init__(self) -> None:
        self.hold_respond = False
        self.held: list[tuple[Any, str]] = []
        self.drop_removes = False
        self.drop_replies = False  # ok frames carrying a request (respond's reply)
        self.routes: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, ws: Any) -> None:
        self.routes.append(ws)
        server = ws.connect_to_server()

        def to_server(msg: str | bytes) -> None:
            is_respond = isinstance(msg, str) and json.loads(msg).get("type") == "respond"
            if self.hold_respond and is_respond:
                with self.lock:
                    self.held.append((server, msg))
                return
            server.send(msg)

        def to_page(msg: str | bytes) -> None:
            frame = json.loads(msg) if isinstance(msg, str) else {}
            if self.drop_removes and frame.get("type") == "inbox.remove":
                return
            if self.drop_replies and frame.get("type") == "ok" and "request" in frame:
                return
            ws.send(msg)

        ws.on_message(to_server)
        server.on_message(to_page)

    def cut(self) -> None:
        """Drop the page's current socket, as a network failure would."""
        self.routes[-1].close(code=1011, reason="cut by the test")

    def release(self) -> None:
        with self.lock:
            held, self.held = self.held, []
        for server, msg in held:
            server.send(msg)


def open_routed(context: Any, url: str, token: str, relay: Relay) -> Any:
    page = context.new_page()
    page.route_web_socket(re.compile(r"/ws$"), relay)
    page.goto(f"{url}/#token={token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    return page


def test_sending_shows_progress_then_the_verdict(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    relay = Relay()
    page = open_routed(context, hub.url, human.token, relay)
    fut = agent.ask(human.handle, "Progress please?", choices=["ok"], wait=30)
    item = page.get_by_role("article", name=re.compile("Progress please"))
    relay.hold_respond = True
    item.get_by_role("button", name="ok").click()
    expect(item.locator(".verdict")).to_have_text("Sending…")
    expect(item.get_by_role("button", name="ok")).to_be_disabled()
    expect(item).to_have_attribute("aria-busy", "true")
    assert not fut.done()
    relay.release()
    expect(item.locator(".verdict")).to_contain_text("Accepted")
    assert fut.result(ms(10) / 1000).value == "ok"


def test_answer_after_another_device_answered_says_already_resolved(
        hub: HubProcess, agent: SdkClient, runner: Any, human: Human, context: Any) -> None:
    relay = Relay()
    page = open_routed(context, hub.url, human.token, relay)
    fut = agent.ask(human.handle, "Who wins the race?", choices=["me", "you"], wait=30)
    item = page.get_by_role("article", name=re.compile("Who wins the race"))
    expect(item).to_be_visible()

    relay.drop_removes = True  # this page will not hear that it is gone
    phone = SdkClient(runner, hub.url, human.token)
    try:
        phone.respond(_op_id(page, "Who wins the race"), "you")
    finally:
        phone.close()
    assert fut.result(ms(10) / 1000).value == "you"

    item.get_by_role("button", name="me").click()
    expect(item.locator(".verdict")).to_contain_text("Already resolved")
    expect(item.locator(".verdict")).to_contain_text("another tab")


def test_answer_after_expiry_says_expired(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    relay = Relay()
    relay.drop_removes = True
    page = open_routed(context, hub.url, human.token, relay)
    pending = agent.create(human.handle, "Too slow?", choices=["yes"], expires_in=1)
    item = page.get_by_role("article", name=re.compile("Too slow"))
    expect(item.locator("time.countdown")).to_have_text("expiring…", timeout=ms(5))
    assert agent.wait(pending.op_id, wait=5).status == "expired"
    item.get_by_role("button", name="yes").click()
    expect(item.locator(".verdict")).to_contain_text("expired")


def test_answer_lost_with_the_connection_can_be_sent_again(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    relay = Relay()
    page = open_routed(context, hub.url, human.token, relay)
    fut = agent.ask(human.handle, "Lost in transit?", choices=["resend"], wait=30)
    item = page.get_by_role("article", name=re.compile("Lost in transit"))
    relay.hold_respond = True
    item.get_by_role("button", name="resend").click()
    expect(item.locator(".verdict")).to_have_text("Sending…")
    relay.cut()  # the respond never reaches the hub
    relay.held.clear()
    relay.hold_respond = False
    expect(item.locator(".verdict")).to_contain_text("Not delivered", timeout=ms(10))
    button = item.get_by_role("button", name="resend")
    expect(button).to_be_enabled()
    assert not fut.done()
    button.click()
    assert fut.result(ms(10) / 1000).value == "resend"


def test_verdict_lost_with_the_connection_is_found_in_history(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    relay = Relay()
    page = open_routed(context, hub.url, human.token, relay)
    fut = agent.ask(human.handle, "Did it land?", choices=["yes"], wait=30)
    item = page.get_by_role("article", name=re.compile("Did it land"))
    relay.drop_removes = relay.drop_replies = True  # the hub records it; the page hears nothing
    item.get_by_role("button", name="yes").click()
    assert fut.result(ms(10) / 1000).value == "yes"
    expect(item.locator(".verdict")).to_have_text("Sending…")
    relay.cut()
    relay.drop_removes = relay.drop_replies = False
    expect(item.locator(".verdict")).to_contain_text("Accepted", timeout=ms(10))
    expect(item).to_have_count(0)


def _op_id(page: Any, question: str) -> str:
    art = page.get_by_role("article", name=re.compile(re.escape(question)))
    op_id = art.get_attribute("data-op-id")
    assert op_id
    return op_id
