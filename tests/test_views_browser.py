"""The notebook view in headless Chromium: the page `explainers.save_html` writes (the table that Jupyter shows for
`to_html(...)` and for an `Explanation`), read back as a person sees it: the words, and the colour behind each.

With `LABELATTN_NOTEBOOK_SCREENSHOT=path` it shows TREC questions explained by the served model
(`LABELATTN_MODEL`, else the default trained model) and saves a picture of it to `path` (docs/notebook.png).
"""

import os
from pathlib import Path

import pytest
from conftest import PLANTED_WORD, save_model
from test_space_browser import CHROMIUM, browser  # noqa: F401 (browser: a fixture)

from explainers import compare, load_classifier, save_html
from explainers.views import AGAINST, TOWARDS, flatten, scaled
from labelattn.space.app import EXAMPLES, find_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make chromium)"),
]
METHODS = ["label_attention", "integrated_gradients", "shap"]


def shown_words(browser, page_file: Path) -> list[dict]:  # noqa: F811
    """Every coloured word of the page as the browser lays it out: its text, hover title and background."""
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    page.goto(page_file.as_uri())
    words = page.locator(".labelattn-explanations .word").evaluate_all(
        "spans => spans.map(s => ({text: s.innerText, title: s.title, background: getComputedStyle(s).backgroundColor,"
        " visible: s.getBoundingClientRect().width > 0}))"
    )
    page.close()
    return words


def test_the_saved_table_shows_every_word_on_its_colour(browser, planted_embedding_model, tokenizer, tmp_path):  # noqa: F811
    texts = [f"where did the {PLANTED_WORD} go", "who wrote this book"]
    explained = compare(planted_embedding_model, tokenizer, texts, METHODS, options={"shap": {"max_samples": 8}})
    words = shown_words(browser, save_html(tmp_path / "table.html", explained))
    flat = flatten(explained)
    assert [w["text"] for w in words] == [word for exp in flat for word in exp.words]
    assert all(w["visible"] for w in words)
    expected = [(value, score) for exp in flat for value, score in zip(scaled(exp.scores), exp.scores, strict=True)]
    for word, (value, score) in zip(words, expected, strict=True):
        # Chromium reports the computed colour as rgba(r, g, b, a), or rgb(r, g, b) when a is 1; it keeps the
        # alpha to 8 bits (steps of 1/255), the page writes it to 3 decimals.
        channels = word["background"].removeprefix("rgba(").removeprefix("rgb(").rstrip(")").split(", ")
        alpha = float(channels[3]) if len(channels) == 4 else 1.0
        assert alpha == pytest.approx(abs(value), abs=4e-3), word
        assert tuple(int(c) for c in channels[:3]) == (TOWARDS if value >= 0 else AGAINST) or alpha == 0, word
        assert float(word["title"]) == pytest.approx(score, rel=1e-3, abs=1e-12)
    planted = [w for w in words if w["text"] == PLANTED_WORD]
    assert len(planted) == len(METHODS) and all(w["background"] == f"rgb{TOWARDS}" for w in planted)


def test_screenshot(browser, planted_embedding_model, tokenizer, tmp_path):  # noqa: F811
    """TREC questions × three methods, as a picture; with `LABELATTN_NOTEBOOK_SCREENSHOT=path` (`make screenshot`)
    of the served model, saved for the docs; otherwise of the planted-word model, in a temporary folder."""
    target = os.environ.get("LABELATTN_NOTEBOOK_SCREENSHOT")
    model_dir = find_model() if target else str(save_model(planted_embedding_model, tokenizer, tmp_path / "model"))
    assert model_dir is not None, "no model to show: train one (labelattn train) or set LABELATTN_MODEL"
    model, tokenizer = load_classifier(model_dir)
    explained = compare(model, tokenizer, EXAMPLES[:3], METHODS, options={"shap": {"max_samples": 64}})
    page_file = save_html(tmp_path / "table.html", explained, title="labelattn: TREC questions × three methods")
    path = Path(target) if target else tmp_path / "notebook.png"
    page = browser.new_page(viewport={"width": 1100, "height": 600}, device_scale_factor=1)
    page.goto(page_file.as_uri())
    page.locator(".labelattn-explanations").screenshot(path=path)
    page.close()
    assert path.read_bytes().startswith(b"\x89PNG")
