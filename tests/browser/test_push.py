"""Web Push in headless Chromium, against a real ``a2h serve``: the installable inbox's
service worker shows the hub's notification and acts on its click.

What is verified, exactly (headless Chromium has no push service, so
``PushManager.subscribe`` is refused there; tests/test_notify.py covers the hub's side of a
real push — VAPID and RFC 8291 — against a stand-in push service):

- the inbox registers /sw.js and it activates; the manifest and icons are served;
- a push message, built by the hub's own ``hub.notify.webpush.single``, delivered to the
  service worker through the DevTools protocol (``ServiceWorker.deliverPushMessage``),
  makes it call ``showNotification``: the notification is read back with
  ``registration.getNotifications()`` (title, body, deep link, actions);
- a ``notificationclick`` event for that very notification, dispatched in the service
  worker (a ``NotificationEvent``; headless Chromium shows no clickable notification),
  focuses the open inbox at the item; with an action button, the service worker answers
  with the page's session cookie, and the agent gets the answer from ``human:<handle>``;
- offline, a navigation gets the shell that says it is reconnecting.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from browser_util import Human, SdkClient, ms, playwright_expect
from e2e_util import UNIT, HubProcess

from hub.notify import webpush

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
expect = playwright_expect()


def poll(page: Any, fn: Any, what: str, timeout: float = 10.0) -> Any:
    """Poll ``fn()`` (Playwright calls pump its events) until truthy, bounded in time."""
    end = time.monotonic() + timeout * UNIT
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"not reached in time: {what}")
        page.wait_for_function("() => true")  # one round trip to the browser


def installed_inbox(context: Any, hub: HubProcess, human: Human) -> tuple[Any, Any, str]:
    """The signed-in inbox with its service worker active, a DevTools session on it and
    the worker's registration id."""
    context.grant_permissions(["notifications"], origin=hub.url)
    page = context.new_page()
    page.goto(f"{hub.url}/#token={human.token}")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    page.wait_for_function("navigator.serviceWorker.ready.then(r => !!r.active)")
    page.wait_for_function("navigator.serviceWorker.controller !== null || "
                           "navigator.serviceWorker.ready.then(r => r.active.state === 'activated')")
    cdp = context.new_cdp_session(page)
    regs: list[dict[str, Any]] = []
    cdp.on("ServiceWorker.workerRegistrationUpdated",
           lambda e: regs.extend(r for r in e["registrations"] if not r["isDeleted"]))
    cdp.send("ServiceWorker.enable")
    poll(page, lambda: regs, "the service worker's registration")
    return page, cdp, regs[-1]["registrationId"]


def deliver(cdp: Any, hub: HubProcess, registration: str, message: dict[str, Any]) -> None:
    cdp.send("ServiceWorker.deliverPushMessage",
             {"origin": hub.url, "registrationId": registration, "data": json.dumps(message)})


def deliver_until_shown(page: Any, cdp: Any, hub: HubProcess, registration: str,
                        message: dict[str, Any], attempts: int = 5) -> list[dict[str, Any]]:
    """Deliver a push and wait for its notification; deliver it again if none shows within
    2 s. A DevTools-delivered push can be dropped while the worker is still starting, as a
    real push service's can; a re-delivery shows the same notification (same tag), never a
    second one."""
    for attempt in range(attempts):
        deliver(cdp, hub, registration, message)
        try:
            shown: list[dict[str, Any]] = poll(page, lambda: notifications(page),
                                               "the notification", timeout=2.0)
            return shown
        except AssertionError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def notifications(page: Any) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = page.evaluate(
        "navigator.serviceWorker.ready.then(r => r.getNotifications()).then(ns => ns.map("
        "n => ({title: n.title, body: n.body, tag: n.tag, data: n.data, "
        "actions: n.actions.map(a => [a.action, a.title])})))")
    return shown


def click(context: Any, tag: str, action: str = "") -> None:
    """A click on the notification tagged ``tag`` (or on one of its action buttons): the
    ``notificationclick`` event, dispatched in the service worker with that notification."""
    [worker] = context.service_workers
    worker.evaluate(
        "([tag, action]) => self.registration.getNotifications({tag}).then(ns => "
        "self.dispatchEvent(new NotificationEvent('notificationclick', "
        "{notification: ns[0], action})))", [tag, action])


def test_a_pushed_request_shows_a_notification_whose_click_lands_on_the_item(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page, cdp, registration = installed_inbox(context, hub, human)
    for path in ("/manifest.webmanifest", "/icon-192.png", "/icon-512.png", "/sw.js"):
        assert page.request.get(hub.url + path).ok, path
    assert page.locator("link[rel=manifest]").count() == 1
    for i in range(6):  # enough items that the one asked last is out of view
        agent.create(human.handle, f"Filler {i}", conversation="push", choices=["a", "b", "c"])
    pending = agent.create(human.handle, "Which region for the **replica**?",
                           conversation="push", choices=["eu-west", "us-east"])
    message = webpush.single(pending.request)
    page.get_by_role("button", name="History").click()  # the inbox is not on the item

    [shown] = deliver_until_shown(page, cdp, hub, registration, message)
    assert shown["title"] == "Question from agent:ci"
    assert shown["body"] == "Which region for the **replica**?"
    assert shown["data"]["url"] == f"/#item={pending.op_id}"
    assert shown["actions"] == [["choice-0", "eu-west"], ["choice-1", "us-east"]]

    click(context, shown["tag"])
    item = page.get_by_role("article", name=re.compile("Which region for the"))
    expect(item).to_be_focused()
    expect(page.locator("#inbox-view")).to_be_visible()
    assert notifications(page) == []  # the click closed it


def test_an_action_button_answers_from_the_notification(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page, cdp, registration = installed_inbox(context, hub, human)
    fut = agent.ask(human.handle, "Restart the **billing** workers?", conversation="push",
                    kind="approval", wait=30)
    item = page.get_by_role("article", name=re.compile("Restart the billing workers"))
    expect(item).to_be_visible()
    view = page.evaluate("fetch('/api/inbox', {credentials: 'same-origin'}).then(r => r.json())")
    [request] = [r for r in view["items"] if r["question"].startswith("Restart")]
    [shown] = deliver_until_shown(page, cdp, hub, registration, webpush.single(request))
    assert shown["actions"] == [["approve", "Approve"], ["reject", "Reject"]]

    click(context, shown["tag"], "approve")  # POSTed by the service worker, with the cookie
    answer = fut.result(ms(10) / 1000)
    assert (answer.status, answer.value) == ("answered", {"approved": True, "comment": ""})
    assert answer.actor == f"human:{human.handle}"
    expect(item).to_have_count(0)
    page.get_by_role("button", name="History").click()
    row = page.locator("#history-list > li").first
    expect(row).to_contain_text(f"human:{human.handle}")  # who answered, and when
    expect(row.locator("time")).to_have_count(1)


def test_offline_the_installed_inbox_says_it_is_reconnecting(
        hub: HubProcess, human: Human, context: Any) -> None:
    page, _, _ = installed_inbox(context, hub, human)
    page.reload()  # now controlled by the service worker, shell cached
    page.wait_for_function("navigator.serviceWorker.controller !== null")
    context.set_offline(True)
    try:
        page.goto(f"{hub.url}/")
        expect(page.get_by_role("heading", name="Reconnecting…")).to_be_visible()
        expect(page).to_have_title(re.compile("Reconnecting"))
    finally:
        context.set_offline(False)
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=ms(40))
