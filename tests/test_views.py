"""The views of explanations (`explainers.views`), the check of an explanation against a model
(`explainers.checks.check_explanation`) and several methods on one text (`explainers.compare`). The HTML table in a real
browser: test_views_browser.py."""

import html
import re

import matplotlib
import pytest
from conftest import PLANTED_WORD, make_model

from explainers import ExplainerInputError, Explanation, MethodError, compare, explain, save_html, target_for, to_html
from explainers.checks import check_explanation
from explainers.outputs import describe
from explainers.views import diagnostics, flatten, method_title, plot, scaled, segments

matplotlib.use("Agg")
TEXTS = [f"where did the {PLANTED_WORD} go", "who wrote <b>this</b> book"]


@pytest.fixture(scope="module")
def model(planted_embedding_model):
    return planted_embedding_model


@pytest.fixture(scope="module")
def explained(model, tokenizer) -> dict[str, list[Explanation]]:
    methods = ["label_attention", "integrated_gradients", "shap"]
    return compare(model, tokenizer, TEXTS, methods, options={"shap": {"max_samples": 8}})


def spans_of(page: str) -> list[tuple[str, str, str]]:
    """`(colour, score, word)` of every coloured word of an HTML table."""
    found = re.findall(r'<span class="word" style="background:(rgba\([^)]*\))" title="([^"]*)">([^<]*)</span>', page)
    return [(colour, score, html.unescape(word)) for colour, score, word in found]


def test_the_table_has_one_row_per_text_and_method_with_words_on_their_sign_colour(explained):
    page = to_html(explained)
    rows = re.findall(r"<tr><td>(\d+)</td><td class=\"method\">([^<]*)</td>", page)
    # A text's methods together, in the order given; the text number in the first column.
    methods = ("label_attention", "integrated_gradients", "shap")
    assert rows == [(str(t), html.escape(method_title(m))) for t in (1, 2) for m in methods]
    words = spans_of(page)
    flat = flatten(explained)
    assert [word for _, _, word in words] == [word for exp in flat for word in exp.words]
    # Each row on its own scale: its largest |score| at full colour; green for, red against; the score on hover.
    for exp in flat:
        row, words = words[: len(exp.words)], words[len(exp.words) :]
        alphas = [float(colour.rsplit(",", 1)[1].rstrip(")")) for colour, _, _ in row]
        assert max(alphas) == pytest.approx(1.0, abs=1e-3)
        for (colour, score, _), value in zip(row, exp.scores, strict=True):
            assert colour.startswith("rgba(22, 163, 74," if value >= 0 else "rgba(220, 38, 38,")
            assert float(score) == pytest.approx(value, rel=1e-3, abs=1e-12)
        if PLANTED_WORD in exp.words:
            planted = row[exp.words.index(PLANTED_WORD)]
            assert planted[0] == "rgba(22, 163, 74, 1.000)", exp.method  # every method finds the planted word
    assert "&lt;" in page and "<b>" not in page  # the text's own markup is escaped
    assert page.count("integration error") == 2 and page.count("Sampling:") == 2  # IG's and SHAP's checks, per text


def test_notebooks_show_the_table(explained):
    exp = explained["integrated_gradients"][0]
    assert exp._repr_html_() == str(to_html(exp)) == str(exp.to_html())
    assert to_html(explained)._repr_html_() == str(to_html(explained))
    assert "probability" in exp._repr_html_() and f"{exp.probability:.3f}" in exp._repr_html_()


def test_save_html_writes_a_standalone_page(explained, tmp_path):
    path = save_html(tmp_path / "page.html", explained, title="Planted <words>")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and '<meta charset="utf-8">' in page
    assert "<title>Planted &lt;words&gt;</title>" in page and str(to_html(explained)) in page


def test_a_pair_target_is_kept_where_the_method_can_take_it(model, tokenizer):
    asked, weights = ("planted", "other"), "label_attention_weights"  # weights explain no difference of classes
    assert target_for("integrated_gradients", asked) == asked and target_for(weights, asked) == "planted"
    assert target_for(weights, [asked, None]) == ["planted", None]
    assert target_for("no-such-method", asked) == asked  # explain refuses it, with its message
    both = compare(model, tokenizer, TEXTS[0], [weights, "saliency"], target=asked)
    assert both["saliency"].contrast_label == "other" and both[weights].contrast is None
    assert both[weights].target_label == both["saliency"].target_label == "planted"


def test_compare_refuses_what_it_cannot_do(model, tokenizer):
    with pytest.raises(MethodError, match="a list of method names"):
        compare(model, tokenizer, TEXTS, "saliency")
    with pytest.raises(MethodError, match=r"options are given for \['shap'\]"):
        compare(model, tokenizer, TEXTS, ["saliency"], options={"shap": {"max_samples": 8}})
    with pytest.raises(MethodError, match="Unknown method"):
        compare(model, tokenizer, TEXTS, ["saliency", "nope"])


def test_diagnostics_say_what_each_explanation_carries(explained):
    ig, shap, attention = (explained[m][0] for m in ("integrated_gradients", "shap", "label_attention"))
    # What the scores explain, how they add up (and IG's integration error), in the library's one sentence.
    for exp in (ig, shap, attention):
        assert diagnostics(exp)[0] == describe(exp)
    for exp in (ig, shap):
        assert f"{sum(exp.scores):+.3g}" in describe(exp) and f"{exp.baseline_score:.3g}" in describe(exp)
    assert f"{ig.delta:+.1e}" in diagnostics(ig)[0] and len(diagnostics(ig)) == 1
    # The sampling error where the method reports standard errors.
    errors = shap.extras["standard_errors"]
    assert diagnostics(shap)[1] == (
        f"Sampling: mean standard error of a word's score {sum(errors) / len(errors):.2e} (more samples make it "
        "smaller)."
    )


def test_the_heatmap_of_several_explanations(model, tokenizer, explained):
    classes = explain(model, tokenizer, TEXTS[0], method="label_attention", top_k=2)
    figure = plot(classes)
    image = figure.axes[0].get_images()[0]
    # One method: one shared scale, the scores as they are, one row per class, most probable first.
    for row, exp in zip(image.get_array().tolist(), classes, strict=True):
        assert row == pytest.approx(exp.scores)
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == [exp.target_label for exp in classes]
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == classes[0].words
    # Several methods (other units): each row scaled to its largest score.
    methods = [explained[m][0] for m in ("label_attention", "integrated_gradients")]
    rows = plot(methods).axes[0].get_images()[0].get_array().tolist()
    for row, exp in zip(rows, methods, strict=True):
        assert row == pytest.approx(scaled(exp.scores))
    with pytest.raises(ExplainerInputError, match="one text"):
        plot([explained["shap"][0], explained["shap"][1]])


def test_segments_rebuild_the_text_of_a_pair(tokenizer, bert_folder):
    from explainers import load_classifier

    model, _ = load_classifier(str(bert_folder))
    exp = explain(model, tokenizer, ("A man plays.", "Nobody  sings!"), method="saliency")
    pieces = segments(exp)
    assert "".join(piece for piece, _ in pieces) == "A man plays.\n\nNobody  sings!"
    assert [piece for piece, value in pieces if value is not None] == exp.words
    assert spans_of(to_html(exp))[-1][2] == exp.words[-1]


def test_nothing_to_show_is_said(explained):
    for nothing in ([], {}, "text", 3):
        with pytest.raises(ExplainerInputError, match="Nothing to show"):
            to_html(nothing)
    with pytest.raises(ExplainerInputError, match="different numbers of texts"):
        to_html({"a": explained["shap"], "b": explained["shap"][:1]})


@pytest.mark.filterwarnings("ignore:Text 0 is longer than 4 tokens")
def test_an_explanation_is_checked_against_the_model_it_claims(model, tokenizer, explained):
    exp = explained["integrated_gradients"][0]
    check_explanation(exp, model, tokenizer)
    check_explanation(Explanation.from_dict(exp.to_dict()), model, tokenizer)
    tampered = Explanation.from_dict({**exp.to_dict(), "target_label": "other"})
    with pytest.raises(ExplainerInputError, match="target and target_label are not a class"):
        check_explanation(tampered, model, tokenizer)
    with pytest.raises(ExplainerInputError, match="contrast and contrast_label"):
        check_explanation(
            Explanation.from_dict({**exp.to_dict(), "contrast": 1, "contrast_label": None}), model, tokenizer
        )
    other_words = {**exp.to_dict(), "text": exp.text + " again", "words": exp.words, "spans": exp.spans}
    with pytest.raises(ExplainerInputError, match="not the words this tokenizer gives"):
        check_explanation(Explanation.from_dict(other_words), model, tokenizer)
    # Cut at another length than explain cut it: the words differ, and the check says so.
    with pytest.raises(ExplainerInputError, match="max_length"):
        check_explanation(exp, model, tokenizer, max_length=4)
    without_attention = make_model("embedding", pooling="mean", num_labels=2)
    without_attention.config.id2label = model.config.id2label
    with pytest.raises(ExplainerInputError, match="method 'label_attention' cannot explain"):
        check_explanation(explained["label_attention"][0], without_attention, tokenizer)
