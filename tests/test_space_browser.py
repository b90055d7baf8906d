"""The Space in headless Chromium, as a visitor uses it: type, explain, ask for another class, send an empty text.

Debian's `chromium` (apt) is driven by Python Playwright (`playwright install` would download a browser, which
cannot work offline). With `LABELATTN_SCREENSHOT=path` set, `test_screenshot` saves the page with a real
explanation of the served model (`LABELATTN_MODEL`, else the default trained model) to `path` (`make screenshot`).
"""

import os
import shutil
from pathlib import Path

import pytest
from conftest import PLANTED_WORD, save_model
from test_space import app, bert_dir, running_app  # noqa: F401 (bert_dir: a fixture)

from explainers.views import method_title

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make chromium)"),
]
# Offline and quiet: every host name but loopback resolves to nothing, no updates, no sync, no QUIC.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_page(browser, url: str):
    """A page at `url` that records every request it makes."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.requests = []
    page.on("request", lambda request: page.requests.append(request.url))
    page.goto(url)
    page.locator("#text textarea").wait_for()
    return page


def explain(page, text: str) -> None:
    page.locator("#text textarea").fill(text)
    page.locator("#explain").click()


def choose(page, dropdown: str, option: str) -> None:
    page.locator(f"#{dropdown} input").click()
    # The dropdown's own options: another dropdown's list may still be open.
    page.locator(f"#{dropdown}").get_by_role("option", name=option, exact=True).click()


def test_visitor_explains_asks_another_class_and_sees_errors(browser, planted_embedding_model, tokenizer, tmp_path):
    from playwright.sync_api import expect

    model_dir = str(save_model(planted_embedding_model, tokenizer, tmp_path / "planted"))
    with running_app(model_dir) as url:
        page = open_page(browser, url)
        explain(page, f"where was the {PLANTED_WORD} found")
        highlight, prediction, details = (
            page.locator("#highlight"),
            page.locator("#prediction"),
            page.locator("#details"),
        )
        expect(highlight).to_contain_text(PLANTED_WORD)
        expect(highlight).to_contain_text("found")
        expect(prediction).to_contain_text("planted")
        expect(prediction).to_contain_text("%")  # the probabilities
        expect(details).to_contain_text("Why planted?")
        expect(page.locator("#heatmap img")).to_be_visible()  # the label-attention heatmap

        choose(page, "target", "other")
        page.locator("#explain").click()
        expect(details).to_contain_text("Why other?")
        expect(prediction).to_contain_text("planted")  # the prediction itself does not change

        # "Rather than" with IG, then a method that cannot take it: the greyed-out box is cleared, Explain works.
        choose(page, "method", method_title("integrated_gradients"))
        choose(page, "target", "planted")
        choose(page, "contrast", "other")
        page.locator("#explain").click()
        expect(details).to_contain_text("rather than other")
        choose(page, "method", method_title("label_attention_weights"))  # weights explain no difference
        expect(page.locator("#contrast input")).to_have_value(app.NO_CONTRAST)
        expect(page.locator("#contrast input")).to_be_disabled()
        page.locator("#explain").click()
        expect(details).to_contain_text(method_title("label_attention_weights"))
        expect(details).not_to_contain_text("rather than")

        explain(page, "")
        expect(page.get_by_test_id("toast-body")).to_contain_text("The text is empty")

        outside = [u for u in page.requests if not u.startswith(url.rstrip("/")) and not u.startswith("data:")]
        assert not outside, f"the page asked hosts other than the app: {outside}"
        page.close()


def test_visitor_explains_a_pair_with_a_plain_bert_classifier(browser, bert_dir):  # noqa: F811
    """Any text classifier: a plain BertForSequenceClassification, a premise and a hypothesis typed into the two
    boxes, explained by Integrated Gradients; no heatmap (no label attention), and the compare tab offers only the
    methods the model supports."""
    from playwright.sync_api import expect

    premise, hypothesis = "A man plays a guitar .", "Nobody makes music ."
    with running_app(bert_dir) as url:
        page = open_page(browser, url)
        page.locator("#text textarea").fill(premise)
        page.locator("#text-pair textarea").fill(hypothesis)
        choose(page, "method", method_title("integrated_gradients"))
        page.locator("#explain").click()
        details = page.locator("#details")
        expect(details).to_contain_text("integration error")
        expect(page.locator("#highlight")).to_contain_text("guitar")
        expect(page.locator("#highlight")).to_contain_text("music")
        expect(page.locator("#faithfulness")).to_contain_text("comprehensiveness")
        expect(page.locator("#heatmap")).to_have_count(0)

        page.get_by_role("tab", name="Compare methods").click()
        methods = page.locator("#compare-methods")
        expect(methods).to_contain_text(method_title("attention_rollout"))
        expect(methods).not_to_contain_text(method_title("label_attention"))
        expect(page.locator("#unsupported")).to_contain_text("label-attention")
        page.locator("#compare").click()
        expect(page.locator("#compare-note")).to_contain_text("Why this class?")
        expect(page.locator("#compare-integrated_gradients")).to_contain_text("guitar")
        page.close()


def test_screenshot(browser, planted_embedding_model, tokenizer, tmp_path):
    """A TREC question explained by Integrated Gradients, with the heatmap and the faithfulness, as a picture.

    With `LABELATTN_SCREENSHOT=path` (`make screenshot`) it shows the served model (`LABELATTN_MODEL`, else the
    default trained model) and is saved for the docs; otherwise the planted-word model, in a temporary folder.
    """
    from playwright.sync_api import expect

    target = os.environ.get("LABELATTN_SCREENSHOT")
    model = app.find_model() if target else str(save_model(planted_embedding_model, tokenizer, tmp_path / "model"))
    assert model is not None, "no model to show: train one (labelattn train) or set LABELATTN_MODEL"
    path = Path(target) if target else tmp_path / "space.png"
    with running_app(model) as url:
        page = open_page(browser, url)
        page.locator("#text textarea").fill(app.EXAMPLES[0])
        choose(page, "method", method_title("integrated_gradients"))
        page.locator("#explain").click()
        expect(page.locator("#details")).to_contain_text("integration error")
        expect(page.locator("#heatmap img")).to_be_visible()
        expect(page.locator("#faithfulness")).to_contain_text("comprehensiveness")
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=path, full_page=True)
        page.close()
    assert path.read_bytes().startswith(b"\x89PNG")
