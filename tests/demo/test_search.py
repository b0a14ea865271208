"""The page's "Find the photo" section: its functions in-process, and in the real browser (a
model with contrastive heads searching a folder given with --images, ``search_server`` in
conftest.py; the session's model without them shows the note naming the fix)."""

from __future__ import annotations

import shutil

import pytest


def test_a_model_without_contrastive_heads_gets_the_note(demo_fill_mask):
    from vitbert import demo

    finder = demo.search_for(demo_fill_mask, demo.shapes_examples(32))
    assert finder.retriever is None and "--model.net.itc_dim 128 and the objective" in finder.note
    status, found, gallery = demo.search(finder, "a red circle")
    assert status.startswith("**Cannot search:** This model has no contrastive heads")
    assert (found, gallery) == ("", None)


def test_search_over_the_examples_and_a_folder_matches_the_retriever(itc_export, photo_folder,
                                                                    capsys):
    from vitbert import demo
    from vitbert.predict import FillMask
    from vitbert.retriever import Retriever

    fill_mask = FillMask.from_checkpoint(itc_export, device="cpu")
    examples = demo.shapes_examples(32)
    finder = demo.search_for(fill_mask, examples)
    assert finder.where == f"the {len(examples)} example pictures"
    status, found, gallery = demo.search(finder, "a small red circle", top_k=3)
    assert status.startswith(f"Searched the {len(examples)} example pictures in ")
    assert "contrastive score" in status and found.count('class="vb-found"') == 3
    assert gallery[0][0].shape == (32, 32, 3)

    finder = demo.search_for(fill_mask, examples, photo_folder)
    assert "--images: skipped broken.jpg: cannot identify image file" in capsys.readouterr().err
    _, found, gallery = demo.search(finder, "a green picture")
    want = Retriever.from_checkpoint(itc_export, device="cpu").images_for(
        "a green picture", photo_folder, top_k=demo.SEARCH_RESULTS)
    assert [label for _, label in gallery] == [f"{r['rank']}. {r['image']}"
                                               for r in want["results"]]
    assert gallery[0][0].shape == (48, 64, 3)  # the file, shrunk for display only if large
    assert demo.search(finder, "   ")[0].startswith("**Cannot search:** no sentence yet")


def test_no_examples_and_no_folder_get_the_note(itc_export):
    from vitbert import demo
    from vitbert.predict import FillMask

    finder = demo.search_for(FillMask.from_checkpoint(itc_export, device="cpu"), [])
    assert finder.retriever is None and "pass" not in finder.where
    assert demo.search(finder, "a red circle")[0] == (
        "**Cannot search:** no photos to search: start the page with --images DIR (or "
        "--examples DIR).")


def test_a_folder_without_photos_stops_the_script(itc_export, tmp_path, capsys):
    from helpers import load_script

    (tmp_path / "empty").mkdir()
    code = load_script("demo").main(["--ckpt", str(itc_export), "--images",
                                     str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --images ") and "no photos in it" in err


@pytest.fixture
def browser_page():
    """A function that opens a page of a server in headless Chromium (as test_browser.py)."""
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed: pip install -e '.[dev]'")
    chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    if chromium is None:
        pytest.skip("no Chromium on this machine: apt-get install -y chromium (.ci/run does)")
    from urllib.parse import urlparse

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)

        def open_page(url: str):
            page = browser.new_page(viewport={"width": 1280, "height": 1600})
            host = urlparse(url).netloc
            page.route("**/*", lambda route: route.continue_()
                       if urlparse(route.request.url).netloc == host else route.abort())
            page.set_default_timeout(120_000)
            page.goto(url)
            return page

        yield open_page
        browser.close()


def test_find_the_photo_in_the_browser(search_server, browser_page, itc_export, photo_folder,
                                       tmp_path):
    from vitbert.retriever import Retriever

    page = browser_page(search_server.url)
    page.locator("#search-text textarea").fill("a blue picture")
    page.locator("#search").click()
    page.locator("#search-list .vb-found").first.wait_for()
    page.locator("#search-results img").first.wait_for()
    shown = page.locator("#search-list .vb-found").evaluate_all(
        "items => items.map(item => item.dataset.image)")
    want = Retriever.from_checkpoint(itc_export, device="cpu").images_for(
        "a blue picture", photo_folder, top_k=6)
    assert shown == [r["image"] for r in want["results"]]
    assert sorted(shown) == ["blue.png", "green.png", "red.png"]
    assert page.locator("#search-status").inner_text().startswith(
        f"Searched the 3 photos of {photo_folder} in ")
    page.screenshot(path=str(tmp_path / "search.png"), full_page=True)


def test_the_page_of_a_model_without_contrastive_heads_says_why(demo_server, browser_page):
    page = browser_page(demo_server.url)
    page.get_by_text("This model has no contrastive heads").wait_for()
    assert page.locator("#search-text").count() == 0
