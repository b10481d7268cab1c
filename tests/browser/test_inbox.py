"""The inbox in a real browser, against a real ``a2h serve`` subprocess (issue 3).

Agents ask through the SDK; the tests act as the human in headless Chromium and check what
the agent gets back. Nothing sleeps: every wait is Playwright's auto-waiting ``expect``.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from browser_util import ARTIFACTS, ROOT, AsyncRunner, Human, SdkClient, ms, playwright_expect
from e2e_util import UNIT, HubProcess, a2h, create_token

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
expect = playwright_expect()


def open_inbox(context: Any, url: str, token: str | None = None) -> Any:
    """A new tab on the inbox, signed in (by the #token= link, or by the context's cookie)."""
    page = context.new_page()
    page.goto(f"{url}/#token={token}" if token else f"{url}/")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    return page


def article(page: Any, text: str) -> Any:
    return page.get_by_role("article", name=re.compile(re.escape(text)))


# ---------------------------------------------------------------------------- answering


def test_choice_resolves_the_ask_and_vanishes_from_every_tab(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    expect(page).to_have_url(f"{hub.url}/")  # the token left the address bar
    other = open_inbox(context, hub.url)  # a second tab: same cookie
    expect(page).to_have_title("A2H Inbox")

    fut = agent.ask(human.handle, "Deploy **v2.3** now?", conversation="deploys",
                    choices=["yes", "no"], wait=30)
    item = article(page, "Deploy v2.3 now?")
    expect(item).to_be_visible()
    expect(item).to_contain_text("agent:ci")
    expect(item).to_contain_text("deploys")
    expect(item.locator("strong")).to_have_text("v2.3")
    expect(page).to_have_title("(1) A2H Inbox")
    other_item = article(other, "Deploy v2.3 now?")
    expect(other_item).to_be_visible()

    item.get_by_role("button", name="yes", exact=True).click()
    answer = fut.result(ms(10) / 1000)
    assert (answer.status, answer.value) == ("answered", "yes")
    assert answer.actor == f"human:{human.handle}"

    expect(item).to_contain_text("Accepted")
    expect(other_item).to_contain_text("answered in another tab", ignore_case=True)
    expect(page).to_have_title("A2H Inbox")
    expect(other).to_have_title("A2H Inbox")
    expect(item).to_have_count(0)
    expect(other_item).to_have_count(0)
    expect(page.locator("#empty")).to_be_visible()


def test_free_text_is_sent_with_ctrl_enter(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    fut = agent.ask(human.handle, "Name the release?", conversation="naming", wait=30)
    item = article(page, "Name the release?")
    box = item.get_by_role("textbox", name="Answer")
    box.fill("Bookworm\nwith a second line")
    box.press("Control+Enter")
    answer = fut.result(ms(10) / 1000)
    assert (answer.status, answer.value) == ("answered", "Bookworm\nwith a second line")
    expect(item).to_contain_text("Accepted")


def test_send_button_and_empty_answer(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    fut = agent.ask(human.handle, "Any notes?", conversation="notes", wait=30)
    item = article(page, "Any notes?")
    item.get_by_role("button", name="Send").click()
    expect(item).to_contain_text("Type an answer first")
    assert not fut.done()
    item.get_by_role("textbox", name="Answer").fill("none")
    item.get_by_role("button", name="Send").click()
    assert fut.result(ms(10) / 1000).value == "none"


def test_approve_and_reject_with_a_comment(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    ship = agent.ask(human.handle, "Ship release 1.2 to everyone?", conversation="release",
                     kind="approval", wait=30)
    drop = agent.ask(human.handle, "Drop the staging database?", conversation="release",
                     kind="approval", wait=30)

    item = article(page, "Ship release 1.2")
    expect(item).to_contain_text("Approval")
    item.get_by_role("textbox", name="Comment").fill("looks good")
    item.get_by_role("button", name="Approve").click()
    a = ship.result(ms(10) / 1000)
    assert (a.status, a.value) == ("answered", {"approved": True, "comment": "looks good"})
    expect(item).to_contain_text("Accepted")

    item = article(page, "Drop the staging database?")
    item.get_by_role("textbox", name="Comment").fill("not on a Friday")
    item.get_by_role("button", name="Reject").click()
    r = drop.result(ms(10) / 1000)
    assert (r.status, r.value) == ("declined", {"approved": False, "comment": "not on a Friday"})
    expect(item).to_contain_text("Accepted: rejected")


def test_keyboard_moves_chooses_and_approves(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    color = agent.ask(human.handle, "Pick a colour", choices=["red", "green", "blue"],
                      expires_in=100, wait=30)
    go = agent.ask(human.handle, "Go ahead with the rollout?", kind="approval",
                   expires_in=200, wait=30)
    first, second = article(page, "Pick a colour"), article(page, "Go ahead with the rollout?")
    expect(second).to_be_visible()
    expect(first).to_be_visible()

    page.keyboard.press("j")
    expect(first).to_be_focused()
    page.keyboard.press("j")
    expect(second).to_be_focused()
    page.keyboard.press("k")
    expect(first).to_be_focused()
    page.keyboard.press("2")
    assert color.result(ms(10) / 1000).value == "green"

    expect(second).to_be_focused()  # focus moves on to the next request
    page.keyboard.press("a")
    a = go.result(ms(10) / 1000)
    assert a.status == "answered" and a.value["approved"] is True


def test_list_is_ordered_by_nearest_deadline(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    agent.create(human.handle, "Third (300 s)", expires_in=300)
    agent.create(human.handle, "First (100 s)", expires_in=100)
    page2 = open_inbox(context, hub.url)  # one tab sees them live, one reads them at start
    agent.create(human.handle, "Second (200 s)", expires_in=200)
    for p in (page, page2):
        expect(p.get_by_role("article")).to_have_count(3)
        labels = [p.get_by_role("article").nth(i).get_attribute("aria-label") for i in range(3)]
        order = [re.search(r"(\w+) \(", lbl).group(1) for lbl in labels]
        assert order == ["First", "Second", "Third"]
        expect(p).to_have_title("(3) A2H Inbox")


# ---------------------------------------------------------------------------- attention


RECORD_ARRIVALS = """(() => {
  // Wall-clock time (not Date.now, which tests may skew) when each request shows up.
  window.__arrivals = {};
  new MutationObserver(() => {
    for (const el of document.querySelectorAll("article[data-op-id]")) {
      const id = el.dataset.opId;
      if (id in window.__arrivals) continue;
      window.__arrivals[id] = (performance.timeOrigin + performance.now()) / 1000;
    }
  }).observe(document, { childList: true, subtree: true });
})();"""


def test_new_requests_appear_live_within_100ms(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    context.add_init_script(RECORD_ARRIVALS)
    page = open_inbox(context, hub.url, human.token)
    delays = []
    for i in range(5):
        pending = agent.create(human.handle, f"Live {i}?")
        committed = pending.request["created_at"]
        page.wait_for_function("id => id in window.__arrivals", arg=pending.op_id)
        delays.append(page.evaluate("id => window.__arrivals[id]", pending.op_id) - committed)
    delays.sort()
    print(f"inbox.add to screen: median {delays[2] * 1000:.1f} ms, max {delays[-1] * 1000:.1f} ms")
    assert delays[2] < 0.1 * UNIT, delays


FAKE_NOTIFICATIONS = """(() => {
  window.__notes = [];
  window.Notification = class {
    constructor(title, opts) { window.__notes.push({ title, body: opts && opts.body }); }
    static get permission() { return "granted"; }
    static requestPermission() { return Promise.resolve("granted"); }
  };
  Document.prototype.hasFocus = () => false; // the human is looking at another window
  // No Web Push here (tests/browser/test_push.py covers it): with notifications allowed and
  // nothing to subscribe to, "Enable notifications" has nothing left to do.
  delete window.PushManager;
})();"""


def test_desktop_notification_for_new_requests(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    context.add_init_script(FAKE_NOTIFICATIONS)
    agent.create(human.handle, "Already waiting")
    page = open_inbox(context, hub.url, human.token)
    expect(page.get_by_role("button", name="Enable notifications")).to_be_hidden()
    agent.create(human.handle, "Ping **me** when you can", kind="approval")
    page.wait_for_function("window.__notes.length > 0")
    notes = page.evaluate("window.__notes")
    assert notes == [{"title": "Approval request from agent:ci", "body": "Ping me when you can"}]


# ---------------------------------------------------------------------------- time


SKEW = """(() => {
  // This page's clock is an hour behind the hub: countdowns must use hello.now.
  const realNow = Date.now.bind(Date);
  Date.now = () => realNow() - 3600 * 1000;
})();"""


def test_item_expires_on_its_own_and_the_countdown_is_right(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    context.add_init_script(SKEW)
    page = open_inbox(context, hub.url, human.token)
    pending = agent.create(human.handle, "Still there?", expires_in=3)
    deadline = pending.request["deadline"]
    item = article(page, "Still there?")
    countdown = item.locator("time.countdown")
    expect(countdown).to_have_text(re.compile(r"expires in \d+s"))
    text = countdown.inner_text()
    shown = int(re.search(r"(\d+)s", text).group(1))
    assert abs(shown - (deadline - time.time())) <= 1.0, (text, deadline - time.time())

    expect(item).to_contain_text("Expired", timeout=ms(8))
    expect(item).to_have_count(0)
    expect(page).to_have_title("A2H Inbox")
    final = agent.wait(pending.op_id, wait=5)
    assert final.status == "expired"


# ---------------------------------------------------------------------------- resume


def test_hub_restart_reconnects_and_shows_the_true_state(
        tmp_path: Path, runner: AsyncRunner, context: Any) -> None:
    db = tmp_path / "restart.db"
    with HubProcess(db) as hub:
        human_token = create_token(db, human="rita")
        agent = SdkClient(runner, hub.url, create_token(db, agent="ci"))
        try:
            a = agent.create("rita", "Restart A: keep me")
            b = agent.create("rita", "Restart B: answered elsewhere")
            page = open_inbox(context, hub.url, human_token)
            expect(page.get_by_role("article")).to_have_count(2)

            hub.kill()
            indicator = page.get_by_role("status")
            expect(indicator).to_have_attribute("data-state", re.compile("closed|connecting"))
            expect(page.locator("#conn-box")).to_be_visible()
            expect(indicator).to_contain_text(re.compile("Disconnected|Reconnecting"))

            # Hold the page off the network while the world moves on without it.
            context.set_offline(True)
            hub.start()
            other = SdkClient(runner, hub.url, human_token)  # another device of the same human
            try:
                other.respond(b.op_id, "done from the phone")
            finally:
                other.close()
            c = agent.create("rita", "Restart C: asked while you were away")
            expect(article(page, "Restart B")).to_be_visible()  # still stale: offline

            context.set_offline(False)
            expect(indicator).to_have_attribute("data-state", "open", timeout=ms(10))
            expect(indicator).to_have_text("Connected")
            expect(article(page, "Restart A")).to_be_visible()
            expect(article(page, "Restart C")).to_be_visible()
            expect(article(page, "Restart B")).to_have_count(0)
            expect(page).to_have_title("(2) A2H Inbox")

            # And the page is live again on the new socket.
            article(page, "Restart A").get_by_role("textbox", name="Answer").fill("kept")
            article(page, "Restart A").get_by_role("button", name="Send").click()
            assert agent.wait(a.op_id).value == "kept"
            assert agent.wait(c.op_id, wait=0).status == "pending"
        finally:
            agent.close()


# ---------------------------------------------------------------------------- safety


def test_markup_in_a_question_is_text_and_runs_nothing(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))

    question = ('XSS probe <script>window.__xss = 1; alert(1)</script> and '
                '<img src=x onerror="window.__xss = 2; alert(2)"> and '
                '[click me](javascript:window.__xss=3) and <a href="javascript:alert(4)">raw</a>')
    context_msgs = {"messages": [
        {"role": "user", "content": "<img src=y onerror=alert(5)> [ctx](javascript:alert(6))"}]}
    agent.create(human.handle, question, context=context_msgs, choices=["<b>ok</b>", "fine"])
    item = article(page, "XSS probe")
    expect(item).to_be_visible()
    expect(item).to_contain_text("<script>window.__xss = 1; alert(1)</script>")
    expect(item).to_contain_text('<img src=x onerror="window.__xss = 2; alert(2)">')
    expect(item).to_contain_text("[click me](javascript:window.__xss=3)")
    item.locator("details.context summary").click()
    expect(item).to_contain_text("<img src=y onerror=alert(5)>")
    assert item.locator("script, img, iframe, object, embed, a").count() == 0
    expect(item.get_by_role("button", name="<b>ok</b>", exact=True)).to_be_visible()

    item.get_by_text("javascript:window.__xss=3", exact=False).click()
    assert page.evaluate("window.__xss") is None
    assert page.evaluate("document.querySelectorAll('script:not([src])').length") == 0
    assert dialogs == []
    assert not [u for u in requests if re.search(r"/(x|y)$", u)]


def test_safe_links_are_links(hub: HubProcess, agent: SdkClient, human: Human,
                              context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    agent.create(human.handle, "See [the runbook](https://example.com/runbook) and "
                 "`code` and\n\n```\nblock <b>\n```\n\n- one\n- two")
    item = article(page, "See the runbook")
    link = item.get_by_role("link", name="the runbook")
    expect(link).to_have_attribute("href", "https://example.com/runbook")
    expect(link).to_have_attribute("rel", re.compile("noopener"))
    expect(item.locator("pre code")).to_have_text("block <b>")
    expect(item.locator("li")).to_have_count(2)


# ---------------------------------------------------------------------------- sign-in


def test_sign_in_bad_token_paste_and_sign_out(
        hub: HubProcess, human: Human, context: Any) -> None:
    page = context.new_page()
    page.goto(f"{hub.url}/#token=a2h_hu_not-a-real-token")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("not accepted")
    expect(page).to_have_url(f"{hub.url}/")

    agent_token = create_token(human.db, agent="not-a-person")
    page.get_by_label("Access token").fill(agent_token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("does not belong to a person")

    page.get_by_label("Access token").fill(human.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    expect(page.locator("#whoami")).to_have_text(f"Signed in as {human.handle}")
    cookie = next(c for c in context.cookies() if c["name"] == "a2h_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert human.token not in page.content()

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("signed out")
    page.reload()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert not [c for c in context.cookies() if c["name"] == "a2h_session"]


def test_revoked_token_signs_the_page_out(
        hub: HubProcess, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    a2h("token", "revoke", human.token, "--db", str(human.db))
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible(timeout=ms(10))
    expect(page.get_by_role("alert")).to_contain_text("revoked")


# ---------------------------------------------------------------------------- history


def test_history_lists_resolved_requests(
        hub: HubProcess, agent: SdkClient, human: Human, context: Any) -> None:
    page = open_inbox(context, hub.url, human.token)
    fut = agent.ask(human.handle, "Lunch order?", choices=["pizza", "salad"], wait=30)
    article(page, "Lunch order?").get_by_role("button", name="pizza").click()
    assert fut.result(ms(10) / 1000).value == "pizza"
    approval = agent.ask(human.handle, "Merge PR 7?", kind="approval", wait=30)
    item = article(page, "Merge PR 7?")
    item.get_by_role("textbox", name="Comment").fill("needs tests")
    item.get_by_role("button", name="Reject").click()
    assert approval.result(ms(10) / 1000).status == "declined"

    page.get_by_role("button", name="History").click()
    rows = page.locator("#history-list > li")
    expect(rows).to_have_count(2)
    lunch = rows.filter(has_text="Lunch order?")
    expect(lunch.locator(".answer")).to_have_text("pizza")
    expect(lunch.locator(".actor")).to_have_text(f"human:{human.handle}")
    expect(lunch.locator(".took")).to_have_text(re.compile(r"\d+(\.\d)? s"))
    expect(lunch.locator("time")).to_be_visible()
    merge = rows.filter(has_text="Merge PR 7?")
    expect(merge.locator(".answer")).to_have_text("Rejected: “needs tests”")
    expect(rows.first).to_contain_text("Merge PR 7?")  # newest first

    # An expiry while the history is open arrives live, resolved by the system.
    agent.create(human.handle, "Gone soon", expires_in=1)
    expect(rows.filter(has_text="Gone soon").locator(".actor")).to_have_text("system",
                                                                             timeout=ms(8))


# ---------------------------------------------------------------------------- screenshots


CHAT_CONTEXT = {"messages": [
    {"role": "system", "content": "You are the release assistant for the payments team."},
    {"role": "user", "content": "Prepare the **v2.4** release notes."},
    {"role": "assistant",
     "content": "Draft ready:\n\n- faster refunds\n- new `retry-after` header"},
]}


def _fill_inbox(agent: SdkClient, handle: str) -> None:
    agent.create(handle, "Deploy **v2.4.0** to production now?", conversation="deploys",
                 choices=["Deploy", "Wait an hour", "Cancel"], expires_in=600)
    agent.create(handle, "Which customer should get the beta invite first?",
                 conversation="beta", expires_in=1800,
                 context="Candidates: *Acme* (asked twice), *Globex* (largest account).")
    agent.create(handle, "Run migration `0042_add_index` on the primary database?",
                 conversation="db-ops", kind="approval", expires_in=3600,
                 context={"action": "migrate", "migration": "0042_add_index", "rows": 1200000})
    agent.create(handle, "Which headline should we use?", conversation="release-notes",
                 context=CHAT_CONTEXT, expires_in=7200, default="Faster refunds")


def test_screenshots_of_every_kind_of_request(
        hub: HubProcess, agent: SdkClient, browser: Any, context: Any) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    human = Human("ada", create_token(hub.db, human="ada"), hub.db)  # a presentable name
    _fill_inbox(agent, human.handle)

    page = open_inbox(context, hub.url, human.token)
    page.set_viewport_size({"width": 1000, "height": 1200})
    expect(page.get_by_role("article")).to_have_count(4)
    article(page, "Which headline").locator("details.context summary").click()
    expect(article(page, "Which headline")).to_contain_text("release assistant")
    desktop = ARTIFACTS / "inbox-desktop.png"
    page.screenshot(path=str(desktop), full_page=True)

    # docs/inbox.png is committed: refreshed when missing or on request, not on every run.
    docs_png = ROOT / "docs" / "inbox.png"
    if not docs_png.exists() or os.environ.get("A2H_UPDATE_DOCS") == "1":
        shutil.copyfile(desktop, docs_png)

    for scheme in ("light", "dark"):
        phone = browser.new_context(viewport={"width": 360, "height": 800}, color_scheme=scheme,
                                    device_scale_factor=2, is_mobile=True, has_touch=True)
        try:
            p = open_inbox(phone, hub.url, create_token(human.db, human=human.handle))
            expect(p.get_by_role("article")).to_have_count(4)
            overflow = p.evaluate("document.documentElement.scrollWidth")
            assert overflow <= 360, f"the page is {overflow}px wide at 360px ({scheme})"
            for name in ("Deploy", "Approve", "Reject", "Send"):
                box = p.get_by_role("button", name=name, exact=True).first.bounding_box()
                assert box and box["x"] >= 0 and box["x"] + box["width"] <= 360, (name, box)
            p.screenshot(path=str(ARTIFACTS / f"inbox-phone-{scheme}.png"), full_page=True)
        finally:
            phone.close()

    # History after answering one.
    article(page, "Deploy v2.4.0").get_by_role("button", name="Deploy", exact=True).click()
    expect(page.get_by_role("article")).to_have_count(3)
    page.get_by_role("button", name="History").click()
    expect(page.locator("#history-list > li")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "history.png"), full_page=True)
    assert desktop.stat().st_size > 10_000
