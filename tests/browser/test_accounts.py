"""Sign-in links and accounts (issue 15, defect 10): a ``#token=`` link for another person
never switches accounts silently. The page asks, naming both accounts with their tenants;
staying keeps the session and drops the token from the address bar. The header shows the
tenant beside the name.
"""

from __future__ import annotations

from typing import Any

import pytest
from browser_util import Human, playwright_expect
from e2e_util import HubProcess, create_token

pytestmark = [pytest.mark.browser, pytest.mark.e2e]
expect = playwright_expect()


def signed_in_as(page: Any, handle: str, tenant: str) -> None:
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    expect(page.locator("#whoami")).to_have_text(f"Signed in as {handle}")
    expect(page.locator("#tenant")).to_have_text(tenant)
    expect(page.locator("#tenant-box")).to_be_visible()


def test_a_link_for_someone_else_asks_before_switching(
        hub: HubProcess, human: Human, context: Any) -> None:
    other_tenant = f"t-{human.handle}"[:40]
    other = f"{human.handle}-b"
    other_token = create_token(hub.db, human=other, tenant=other_tenant)

    page = context.new_page()
    page.goto(f"{hub.url}/#token={human.token}")
    signed_in_as(page, human.handle, "default")
    expect(page.get_by_role("alertdialog")).to_be_hidden()

    # A new tab opens the other person's link: it asks, and the current inbox stays up.
    page = context.new_page()
    page.goto(f"{hub.url}/#token={other_token}")
    dialog = page.get_by_role("alertdialog", name="Switch accounts?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text(f"This link signs in as {other} (tenant {other_tenant}).")
    expect(dialog).to_contain_text(f"You are signed in as {human.handle} (tenant default).")
    expect(page).to_have_url(f"{hub.url}/")  # the token left the address bar at once
    signed_in_as(page, human.handle, "default")

    dialog.get_by_role("button", name=f"Stay signed in as {human.handle}").click()
    expect(dialog).to_be_hidden()
    signed_in_as(page, human.handle, "default")
    assert other_token not in page.content()
    page.reload()  # the session is still the first person's
    signed_in_as(page, human.handle, "default")

    # The same link again, in the same tab (a hash change): this time, switch.
    page.goto(f"{hub.url}/#token={other_token}")
    expect(dialog).to_be_visible()
    expect(page).to_have_url(f"{hub.url}/")
    dialog.get_by_role("button", name=f"Switch to {other}").click()
    expect(dialog).to_be_hidden()
    signed_in_as(page, other, other_tenant)
    page.reload()
    signed_in_as(page, other, other_tenant)


def test_a_link_for_the_same_person_signs_in_without_asking(
        hub: HubProcess, human: Human, context: Any) -> None:
    page = context.new_page()
    page.goto(f"{hub.url}/#token={human.token}")
    signed_in_as(page, human.handle, "default")
    again = context.new_page()
    again.goto(f"{hub.url}/#token={human.token}")
    signed_in_as(again, human.handle, "default")
    expect(again.get_by_role("alertdialog")).to_be_hidden()
    expect(again).to_have_url(f"{hub.url}/")
