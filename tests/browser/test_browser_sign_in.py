"""Every page asks for a signed-in user first, and sends them back where they were going."""

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_a_visitor_signs_in_and_lands_on_the_page_they_asked_for(
    open_page, daphne_server, screenshot
):
    page = open_page("visitor")

    response = page.goto(f"{daphne_server}/approvals/")
    # Served under a strict policy, so any inline script or style would fail these tests.
    assert "script-src 'self' 'nonce-" in response.headers["content-security-policy"]
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/approvals/$"))
    page.get_by_label("Username").fill("reviewer")
    page.get_by_label("Password").fill("wrong password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("do not match")
    screenshot(page, "login")
    page.get_by_label("Password").fill("reviewer-demo-pass")
    page.get_by_role("button", name="Sign in").click()

    expect(page).to_have_url(re.compile(r"/approvals/$"))
    expect(page.get_by_role("heading", name="Approvals")).to_be_visible()
