"""A real browser on the running page: headless Chromium (Debian's package, driven by Playwright)
uploads a picture, types a sentence, clicks Fill and reads the filled words off the page.

Playwright's own browser download is not reachable here, so the test points it at the system's
Chromium (.ci/run installs it). It skips, saying why, only where Playwright or Chromium is missing.
Every request the page makes outside the test server is refused: the test never reaches the network.
"""

from __future__ import annotations

import shutil
from urllib.parse import urlparse

import pytest

sync_api = pytest.importorskip("playwright.sync_api",
                               reason="playwright is not installed: pip install -e '.[dev]'")
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
TIMEOUT_MS = 120_000  # a busy 2-core CPU


@pytest.fixture
def page(demo_server):
    if CHROMIUM is None:
        pytest.skip("no Chromium on this machine: apt-get install -y chromium (.ci/run does)")
    host = urlparse(demo_server.url).netloc
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.route("**/*", lambda route: route.continue_()
                   if urlparse(route.request.url).netloc == host else route.abort())
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(demo_server.url)
        yield page
        browser.close()


def test_upload_type_click_read_the_filled_words(page, demo_fill_mask, trained, tmp_path):
    text = "a small [MASK] circle left of a large blue square"
    page.locator("#photo input[type=file]").set_input_files(str(trained.photo))
    page.locator("#photo img").first.wait_for()  # the upload has reached the server
    sentence = page.locator("#sentence textarea")
    sentence.fill(text)
    page.locator("#fill").click()
    page.locator("#answers .vb-mask").first.wait_for()
    page.locator("#attention img").first.wait_for()

    shown = page.locator("#answers .vb-with-photo .vb-word").all_inner_texts()
    text_only = page.locator("#answers .vb-text-only .vb-word").all_inner_texts()
    expected = demo_fill_mask.compare(text, str(trained.photo), top_k=5)["masks"][0]
    assert shown == [guess["token_str"] for guess in expected["with_image"]]
    assert text_only == [guess["token_str"] for guess in expected["text_only"]]
    assert page.locator("#status").inner_text().startswith("Answered in ")

    screenshot = tmp_path / "demo_page.png"
    page.screenshot(path=str(screenshot), full_page=True)
    print(f"\nscreenshot of the page: {screenshot}")
    assert screenshot.stat().st_size > 10_000


def test_picking_a_gallery_picture_fills_photo_and_sentence(page):
    from vitbert import demo

    examples = demo.shapes_examples(32, count=demo.GALLERY_SIZE)
    page.locator("#gallery").get_by_role("button", name=f"Thumbnail 3 of {len(examples)}").click()
    sentence = page.locator("#sentence textarea")
    page.wait_for_function("(want) => document.querySelector('#sentence textarea').value === want",
                           arg=examples[2].text)
    assert sentence.input_value() == examples[2].text
    page.locator("#fill").click()
    page.locator("#answers .vb-mask").first.wait_for()
    assert page.locator("#answers .vb-with-photo .vb-word").count() == 5


def test_a_sentence_without_mask_gets_a_message_in_the_page(page, trained):
    page.locator("#photo input[type=file]").set_input_files(str(trained.photo))
    page.locator("#photo img").first.wait_for()
    page.locator("#sentence textarea").fill("a red circle")
    page.locator("#fill").click()
    page.get_by_text("Cannot answer: No [MASK] in the sentence").wait_for()
