"""The pages added after the first four, in a real browser (headless Chromium through Selenium):
a message typed on one node's Messages page arrives live on the other's (inbox unread count, then
the conversation, then the read receipt back on the sender's page, never reloaded); a mode locked on
the Focus page is opened with a QR image uploaded; a temporary key is enrolled and used, and the
Health page shows the bypass; bedtime is set on its page with the sun times at the place. Every new
page passes axe-core (no serious or critical violations) and is photographed at 1280×800 and
390×844 under .build/screenshots/."""
import datetime
import shutil
import subprocess

import pytest

from tandem_testkit import befriend, cli, cli_json
from test_dashboard import CHROMIUM, DRIVER, browser, check_accessibility, click, flash, live, photograph, text_of, wait  # noqa: F401

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromium-driver are not installed (make test-deps)")


def live_text(d):
    return text_of(d, By.ID, "live")


def test_messages_live_between_two_nodes(make_web_node, browser):  # noqa: F811
    alice = make_web_node("alice").start()
    bob = make_web_node("bob").start()
    cli(alice, "name", "Alice")
    cli(bob, "name", "Bob")
    befriend(alice, bob)
    cli(alice, "message", "settings", bob.id, "--read-receipts", "on")
    cli(bob, "message", "settings", alice.id, "--read-receipts", "on")
    d = browser

    # Bob keeps his inbox open.
    d.get(bob.login_url())
    d.get(f"http://127.0.0.1:{bob.web_port()}/messages")
    bob_tab = d.current_window_handle
    live(d)
    row = f'#conversations li[data-id="{alice.id}"]'
    wait(d, "Alice in Bob's inbox", lambda d: d.find_elements(By.CSS_SELECTOR, row + '[data-unread="0"]'))

    # Alice writes from her page.
    d.switch_to.new_window("tab")
    alice_tab = d.current_window_handle
    d.get(alice.login_url())
    d.get(f"http://127.0.0.1:{alice.web_port()}/messages?with={bob.id}")
    live(d)
    d.find_element(By.ID, "message-text").send_keys("ready for deep work?")
    d.find_element(By.CSS_SELECTOR, "#send-message button[type=submit]").click()
    wait(d, "the send notice", lambda d: "Sent." in flash(d))
    assert "ready for deep work?" in text_of(d, By.ID, "message-list")
    live(d)

    # Bob's inbox, never reloaded, counts it as unread; he opens the conversation.
    d.switch_to.window(bob_tab)
    wait(d, "the unread count on Bob's page", lambda d: d.find_elements(By.CSS_SELECTOR, row + '[data-unread="1"]'))
    assert int(d.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed") or 0) >= 1
    assert "ready for deep work?" in live_text(d)
    check_accessibility(d, "messages")
    photograph(d, "messages")
    d.find_element(By.CSS_SELECTOR, row + " a").click()
    wait(d, "the message on Bob's page", lambda d: "ready for deep work?" in d.find_element(By.ID, "message-list").text)
    live(d)

    # Alice's conversation shows the read receipt as it comes back.
    d.switch_to.window(alice_tab)
    receipt = "#message-list li.mine .receipt"
    wait(d, "the read receipt on Alice's page",
         lambda d: d.find_element(By.CSS_SELECTOR, receipt).get_attribute("data-receipt") == "read")
    refreshed = int(d.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed") or 0)
    assert refreshed >= 1

    # Bob answers and reacts; both arrive on Alice's page live.
    d.switch_to.window(bob_tab)
    d.find_element(By.CSS_SELECTOR, "#message-list li.theirs form.react button").click()
    wait(d, "the reaction notice", lambda d: "Reacted." in flash(d))
    d.find_element(By.ID, "message-text").send_keys("yes, 25 minutes")
    d.find_element(By.CSS_SELECTOR, "#send-message button[type=submit]").click()
    wait(d, "Bob's send notice", lambda d: "Sent." in flash(d))
    d.switch_to.window(alice_tab)
    wait(d, "Bob's answer on Alice's page", lambda d: "yes, 25 minutes" in d.find_element(By.ID, "message-list").text)
    wait(d, "Bob's reaction on Alice's page", lambda d: "👍" in d.find_element(By.CSS_SELECTOR, "#message-list li.mine").text)
    assert "Sent." in flash(d)  # her own notice is still there: the same page load, nothing navigated
    check_accessibility(d, "conversation")
    photograph(d, "conversation")


def test_focus_keys_health_and_bedtime_pages(make_web_node, browser, tmp_path):  # noqa: F811
    if shutil.which("qrencode") is None:
        pytest.skip("qrencode is not installed (make test-deps installs it)")
    alice = make_web_node("alice").start()
    cli(alice, "key", "enroll", "card", "--tag", "tandem-qr-card-51")
    cli(alice, "mode", "create", "deep", "--block-site", "example.com", "--temp-allow", "example.com", "--main-key", "card")
    qr = tmp_path / "card.png"
    subprocess.run(["qrencode", "-o", str(qr), "-s", "8", "tandem-qr-card-51"], check=True)
    d = browser
    d.get(alice.login_url())
    base = f"http://127.0.0.1:{alice.web_port()}"

    # A temporary key, enrolled from the page.
    d.get(base + "/focus")
    live(d)
    d.find_element(By.ID, "temp-key-name").send_keys("guest")
    d.find_element(By.ID, "temp-key-tag").send_keys("guest-tag")
    d.find_element(By.CSS_SELECTOR, "#temp-key button[type=submit]").click()
    wait(d, "the temporary key notice", lambda d: "temporary key of deep now" in flash(d))
    assert "temporary key of deep" in text_of(d, By.ID, "key-list")

    # Lock with the card's QR photo, uploaded.
    Select(d.find_element(By.ID, "upload-action")).select_by_value("lock")
    d.find_element(By.ID, "upload-qr").send_keys(str(qr))
    d.find_element(By.CSS_SELECTOR, "#key-upload button[type=submit]").click()
    wait(d, "the lock", lambda d: "Locked: mode deep" in live_text(d))

    # The temporary key opens the temporary items (a bypass: it costs health).
    d.find_element(By.ID, "temp-tag").send_keys("guest-tag")
    d.find_element(By.CSS_SELECTOR, "#temp-unlock button[type=submit]").click()
    wait(d, "the temporary unlock", lambda d: "Temporary items open" in flash(d))
    check_accessibility(d, "focus-keys")
    photograph(d, "focus-keys")

    # A photo with no QR code is refused and leaves the lock on; the card's QR photo opens it.
    blank = tmp_path / "blank.png"
    subprocess.run(["qrencode", "-o", str(blank), "-s", "1", "x"], check=True)
    Select(d.find_element(By.ID, "upload-action")).select_by_value("unlock")
    d.find_element(By.ID, "upload-qr").send_keys(str(blank))
    d.find_element(By.CSS_SELECTOR, "#key-upload button[type=submit]").click()
    wait(d, "the refusal", lambda d: "QR" in flash(d) and "Unlocked" not in flash(d))
    assert "Locked: mode deep" in live_text(d)
    Select(d.find_element(By.ID, "upload-action")).select_by_value("unlock")
    d.find_element(By.ID, "upload-qr").send_keys(str(qr))
    d.find_element(By.CSS_SELECTOR, "#key-upload button[type=submit]").click()
    wait(d, "the unlock", lambda d: "Unlocked." in live_text(d))
    assert cli_json(alice, "mode", "status")["locked"] is False

    # Health: the bypass, the pool and the day's timeline.
    d.get(base + "/health")
    live(d)
    assert text_of(d, By.ID, "health-value") == "95"
    assert "temp unlock" in text_of(d, By.ID, "bypasses")
    assert d.find_elements(By.CSS_SELECTOR, "#timeline li")
    check_accessibility(d, "health")
    photograph(d, "health")

    # Bedtime: set on the page, hours chosen so that now is outside the night (no lock at once).
    now = datetime.datetime.now(datetime.timezone.utc)
    d.get(base + "/bedtime")
    live(d)
    assert "No bedtime is set" in live_text(d)
    for field, value in (("bedtime-bed", now + datetime.timedelta(hours=3)), ("bedtime-wake", now + datetime.timedelta(hours=5))):
        el = d.find_element(By.ID, field)
        d.execute_script("arguments[0].value = arguments[1]", el, value.strftime("%H:%M"))
    d.find_element(By.ID, "bedtime-location").send_keys("59.91,10.75")
    d.find_element(By.ID, "bedtime-tz").send_keys("UTC")
    d.find_element(By.CSS_SELECTOR, "#bedtime-set button[type=submit]").click()
    wait(d, "the bedtime notice", lambda d: "Bedtime saved: mode deep" in flash(d))
    shown = cli_json(alice, "bedtime", "show")
    assert shown["enabled"] is True and shown["locked"] is False
    assert "Not locked." in text_of(d, By.ID, "bedtime-state")
    assert len(d.find_elements(By.CSS_SELECTOR, "#sun-times li")) == 3
    assert text_of(d, By.ID, "opens-at")
    check_accessibility(d, "bedtime")
    photograph(d, "bedtime")


def test_a_page_catches_up_with_what_changed_while_its_stream_was_not_open(make_web_node, browser):  # noqa: F811
    """An event that comes between a page's rendering and its stream's opening (or while the stream
    is down) is not lost: the stream's opening fetches the live part once before the page says Live."""
    alice = make_web_node("alice").start()
    cli(alice, "key", "enroll", "card", "--tag", "tandem-qr-card-52")
    cli(alice, "mode", "create", "deep", "--block-site", "example.com", "--main-key", "card")
    d = browser
    d.get(alice.login_url())
    base = f"http://127.0.0.1:{alice.web_port()}"
    d.execute_cdp_cmd("Network.enable", {})
    d.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/events"]})
    try:
        d.get(base + "/focus")
        assert "Locked: mode deep" not in live_text(d)
        wait(d, "the stream refused", lambda d: d.find_element(By.ID, "live-state").get_attribute("data-state") != "live")
        # Locked while the page cannot hear it: the event goes by.
        cli_json(alice, "lock", "--mode", "deep", "--tag", "tandem-qr-card-52")
    finally:
        d.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    # The stream opens again by itself; the page shows the lock without a reload or a new event.
    wait(d, "the lock caught up", lambda d: "Locked: mode deep" in live_text(d), timeout=60)
    assert int(d.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed") or 0) == 0
    live(d)
