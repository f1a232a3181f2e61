"""The dashboard in a real browser (headless Chromium through Selenium): two real nodes befriend
each other through the pages, see each other online live (server-sent events, no reload), run a
challenge with the countdown rings on both pages, and one quits while the other's page shows it.
Every page is checked with axe-core (no serious or critical violations) and photographed at
1280×800 and 390×844 under .build/screenshots/."""
import os
import pathlib
import shutil

import pytest

from tandem_testkit import REPO, cli, last_seq, wait_event

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException  # noqa: E402

SHOTS = REPO / ".build" / "screenshots"
CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromium-driver are not installed (make test-deps)")


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,800",
                "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                "--disable-backgrounding-occluded-windows", "--hide-scrollbars", "--lang=en-US"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def wait(driver, what, predicate, timeout=30):
    try:
        # The live region is replaced as events arrive: an element read mid-swap is stale, not missing.
        return WebDriverWait(driver, timeout, poll_frequency=0.1,
                             ignored_exceptions=[StaleElementReferenceException]).until(lambda d: predicate(d))
    except TimeoutException as e:
        raise AssertionError(f"{what}: not seen within {timeout}s on {driver.current_url}\n"
                             f"{driver.find_element(By.TAG_NAME, 'body').text[:2000]}") from e


def text_of(driver, by, selector):
    """The element's text, read again when a live refresh swapped it away mid-read."""
    for _ in range(50):
        try:
            return driver.find_element(by, selector).text
        except StaleElementReferenceException:
            continue
    return driver.find_element(by, selector).text


def click(driver, by, selector):
    """Clicks the element, found again when a live refresh swapped it away before the click."""
    for _ in range(50):
        try:
            return driver.find_element(by, selector).click()
        except StaleElementReferenceException:
            continue
    return driver.find_element(by, selector).click()


def live(driver):
    """Waits until the page's event stream is open."""
    wait(driver, "the live stream", lambda d: d.find_element(By.ID, "live-state").get_attribute("data-state") == "live")


def flash(driver):
    found = driver.find_elements(By.CSS_SELECTOR, ".flash")
    return found[0].text if found else ""


def check_accessibility(driver, name):
    from axe_selenium_python import Axe
    axe = Axe(driver)
    axe.inject()
    results = axe.run()
    bad = [v for v in results["violations"] if v.get("impact") in ("serious", "critical")]
    assert not bad, f"{name}: " + "; ".join(f"{v['id']} ({v['impact']}): {v['help']} — {[n['target'] for n in v['nodes']][:3]}" for v in bad)


def photograph(driver, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    for (w, h), label in (((1280, 800), "desktop"), ((390, 844), "phone")):
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": w, "height": h, "deviceScaleFactor": 1, "mobile": w < 600})
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(str(SHOTS / f"{name}-{label}.png"))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_befriend_live_challenge_and_pages(make_web_node, browser):
    alice = make_web_node("alice").start()
    bob = make_web_node("bob").start()
    cli(alice, "name", "Alice")
    cli(bob, "name", "Bob")
    d = browser

    # Alice signs in with the link `tandem web` printed and asks Bob, by ID and address.
    d.get(alice.login_url())
    alice_tab = d.current_window_handle
    live(d)
    d.find_element(By.ID, "friend-id").send_keys(bob.id)
    d.find_element(By.ID, "friend-addr").send_keys(bob.address)
    d.find_element(By.ID, "friend-message").send_keys("focus with me?")
    d.find_element(By.CSS_SELECTOR, "#add-friend button[type=submit]").click()
    wait(d, "the request notice", lambda d: "Friend request sent" in flash(d))
    live(d)

    # Bob, in another tab, signs in and accepts the request (it arrives on his page live if it is late).
    d.switch_to.new_window("tab")
    bob_tab = d.current_window_handle
    d.get(bob.login_url())
    live(d)
    accept = f'#received-requests li[data-id="{alice.id}"] form[action="/friends/accept"] button'
    wait(d, "Alice's request on Bob's page", lambda d: d.find_elements(By.CSS_SELECTOR, accept))
    d.find_element(By.CSS_SELECTOR, accept).click()
    wait(d, "the accept notice", lambda d: "friends now" in flash(d))

    # Alice's page, never reloaded, shows Bob online: the event stream drove it.
    d.switch_to.window(alice_tab)
    online = f'#friend-list li[data-id="{bob.id}"][data-online="yes"]'
    wait(d, "Bob online on Alice's page", lambda d: d.find_elements(By.CSS_SELECTOR, online))
    assert int(d.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed") or 0) >= 1
    assert "Friend request sent" in flash(d)  # still the same page load: no navigation happened
    check_accessibility(d, "friends")
    photograph(d, "friends")

    # A challenge: Alice invites from her page, Bob accepts on his, both pages show the rings.
    d.get(f"http://127.0.0.1:{alice.web_port()}/challenges")
    live(d)
    d.find_element(By.ID, "invite-minutes").clear()
    d.find_element(By.ID, "invite-minutes").send_keys("2")
    d.find_element(By.ID, "invite-message").send_keys("deep work")
    d.find_element(By.CSS_SELECTOR, "#invite button[type=submit]").click()
    wait(d, "the invite notice", lambda d: "sent" in flash(d))
    live(d)
    d.switch_to.window(bob_tab)
    d.get(f"http://127.0.0.1:{bob.web_port()}/challenges")
    live(d)
    accept = 'form[action="/challenges/accept"] button'
    wait(d, "the invitation on Bob's page", lambda d: d.find_elements(By.CSS_SELECTOR, accept))
    d.find_element(By.CSS_SELECTOR, accept).click()
    wait(d, "Bob's rings", lambda d: len(d.find_elements(By.CSS_SELECTOR, "svg.ring")) == 2, timeout=40)
    d.switch_to.window(alice_tab)
    wait(d, "Alice's rings", lambda d: len(d.find_elements(By.CSS_SELECTOR, "svg.ring")) == 2, timeout=40)
    clock = d.find_element(By.CSS_SELECTOR, "svg.ring .ring-clock").text
    assert clock.count(":") == 1 and clock <= "2:00", clock
    check_accessibility(d, "challenges")
    photograph(d, "challenges")

    # Bob quits with a reason; Alice's page shows it as it arrives.
    d.switch_to.window(bob_tab)
    d.find_element(By.CSS_SELECTOR, "article.challenge input[name=reason]").send_keys("phone call")
    d.find_element(By.CSS_SELECTOR, "article.challenge form[action='/challenges/quit'] button").click()
    wait(d, "the quit notice", lambda d: "quit" in flash(d))
    d.switch_to.window(alice_tab)
    wait(d, "Bob's quit on Alice's page", lambda d: "phone call" in d.find_element(By.ID, "live").text)

    # A short solo session lands in the ledger; the page shows the signed entry and the chart.
    seq = last_seq(alice)
    cli(alice, "focus", "start", "--duration", "2s")
    wait_event(alice, "ledger.appended", since=seq)
    d.get(f"http://127.0.0.1:{alice.web_port()}/ledger")
    live(d)
    assert len(d.find_elements(By.CSS_SELECTOR, ".chart rect.bar")) == 14
    assert "1 signature" in text_of(d, By.ID, "live")
    check_accessibility(d, "ledger")
    photograph(d, "ledger")

    # Focus: lock a mode and open it again with a typed tag.
    cli(alice, "key", "enroll", "pen", "--tag", "pen-secret")
    cli(alice, "mode", "create", "deep", "--block-site", "example.com", "--main-key", "pen")
    d.get(f"http://127.0.0.1:{alice.web_port()}/focus")
    live(d)
    d.find_element(By.ID, "lock-tag").send_keys("pen-secret")
    d.find_element(By.CSS_SELECTOR, "#lock button[type=submit]").click()
    wait(d, "the lock", lambda d: "Locked: mode deep" in d.find_element(By.ID, "live").text)
    check_accessibility(d, "focus")
    photograph(d, "focus")
    d.find_element(By.ID, "unlock-tag").send_keys("wrong")
    d.find_element(By.CSS_SELECTOR, "#unlock button[type=submit]").click()
    wait(d, "the refusal", lambda d: "matched none" in flash(d))
    wait(d, "still locked", lambda d: "Locked: mode deep" in d.find_element(By.ID, "live").text)
    d.find_element(By.ID, "unlock-tag").send_keys("pen-secret")
    d.find_element(By.CSS_SELECTOR, "#unlock button[type=submit]").click()
    wait(d, "the unlock", lambda d: "Unlocked." in d.find_element(By.ID, "live").text)
