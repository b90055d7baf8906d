"""The explainers' contract at the edges: clear errors for bad input, the result's views, and the CLI."""

import json
import warnings

import numpy as np
import pytest
import torch
from conftest import make_model, save_model
from transformers import BertTokenizerLegacy

from explainers import (
    METHODS,
    ExplainerError,
    ExplainerInputError,
    Explanation,
    MethodError,
    TargetError,
    cost_hints,
    explain,
    parse_options,
    predict,
    supported_methods,
)
from labelattn import minilm_path
from labelattn.cli import main

TEXT = "Héllo,  wörld!! Don't   stop—now: 3.14 e-mails <b>bold</b> unbelievably"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(embedding_model):
    return embedding_model


# --- bad input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text(text, model, tokenizer):
    with pytest.raises(ExplainerInputError, match="empty or only whitespace"):
        explain(model, tokenizer, ["fine", text], method="saliency")


def test_no_text_and_not_a_str(model, tokenizer):
    with pytest.raises(ExplainerError, match="No text"):
        explain(model, tokenizer, [], method="saliency")
    with pytest.raises(ExplainerInputError, match="not a str"):
        explain(model, tokenizer, ["fine", 3], method="saliency")


def test_too_long_text_is_truncated_with_a_warning(encoder_model, tokenizer):
    text = " ".join(["word"] * 200) + " ending"  # the tiny encoder reads 128 positions
    with pytest.warns(UserWarning, match="longer than 128 tokens"):
        exp = explain(encoder_model, tokenizer, text, method="integrated_gradients")
    assert exp.truncated
    assert len(exp.words) == 126 and "ending" not in exp.words
    assert abs(sum(exp.scores) - (exp.score - exp.baseline_score)) <= abs(exp.delta) + 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not explain(encoder_model, tokenizer, "short text", method="saliency").truncated
        # Characters the tokenizer drops (zero-width space, control, lone combining mark) end no truncated text.
        for ending in ("\u200b", " \x00", " \u0301"):
            assert not explain(encoder_model, tokenizer, "short text" + ending, method="saliency").truncated


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (
            {"texts": None},
            ExplainerInputError,
            r"texts is a NoneType: pass a str, a pair \(text, text_pair\) or a list",
        ),
        ({"max_length": 1000}, ExplainerError, r"max_length=1000: give a number of tokens from 3 .* to 128"),
        ({"max_length": 2}, ExplainerError, r"max_length=2: give a number of tokens from 3"),
        ({"batch_size": 0}, ExplainerError, "batch_size=0: give a number of rows, at least 1"),
    ],
)
def test_bad_call_arguments(arguments, error, message, encoder_model, tokenizer):
    with pytest.raises(error, match=message):
        explain(encoder_model, tokenizer, **{"texts": "who wrote it", "method": "saliency", **arguments})


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("positive", r"Unknown target label 'positive': the model's labels are \['class_0'"),
        (3, r"Target index 3 is out of range: the model has 3 classes"),
        (-1, r"Target index -1 is out of range"),
        (1.5, r"class index or a label name"),
        (("class_0", 7), r"Target index 7 is out of range"),
        ((0, 1, 2), r"two classes"),
    ],
)
def test_bad_targets(target, message, model, tokenizer):
    with pytest.raises(TargetError, match=message):
        explain(model, tokenizer, "who wrote it", method="integrated_gradients", target=target)


def test_pair_target_for_a_method_that_cannot_take_one(model, tokenizer):
    with pytest.raises(TargetError, match="'label_attention_weights' cannot explain a pair target"):
        explain(model, tokenizer, "who wrote it", method="label_attention_weights", target=(0, 1))


def test_target_per_text_and_targets_all(model, tokenizer):
    with pytest.raises(TargetError, match="2 targets were given for 1 texts"):
        explain(model, tokenizer, ["who"], method="saliency", target=[0, 1])
    with pytest.raises(ExplainerError, match="only one of target, targets='all' and top_k"):
        explain(model, tokenizer, "who", method="saliency", target=0, targets="all")
    with pytest.raises(ExplainerError, match="the only value is 'all'"):
        explain(model, tokenizer, "who", method="saliency", targets="every")
    exps = explain(model, tokenizer, ["who", "what", "when"], method="saliency", target=[2, "class_1", np.int64(0)])
    assert [exp.target for exp in exps] == [2, 1, 0]


@pytest.mark.parametrize(
    ("backbone", "pooling", "method", "message"),
    [
        ("embedding", "label_attention", "attention_rollout", "returns no attention weights"),
        ("embedding", "label_attention", "attention_flow", "returns no attention weights"),
        ("embedding", "mean", "label_attention", "only a labelattn model pooling with label_attention"),
        ("encoder", "mean", "label_attention", "only a labelattn model pooling with label_attention"),
        ("encoder", "mean", "label_attention_weights", "only a labelattn model pooling with label_attention"),
        ("embedding", "mean", "grad_weighted_attention", "weighs attention, and this model returns none"),
        ("embedding", "label_attention", "lime", "Unknown method 'lime'"),
    ],
)
def test_method_unfit_for_the_model(backbone, pooling, method, message, tokenizer):
    unfit = make_model(backbone, pooling=pooling)
    with pytest.raises(MethodError, match=message):
        explain(unfit, tokenizer, "who wrote it", method=method)


def test_methods_that_fit_a_mean_pooling_encoder(tokenizer):
    model = make_model("encoder", pooling="mean")
    for method in ("attention_rollout", "attention_flow", "grad_weighted_attention", "integrated_gradients"):
        exp = explain(model, tokenizer, "who wrote it", method=method)
        assert len(exp.scores) == 3 and any(s != 0 for s in exp.scores)


def test_model_and_tokenizer_swapped_or_missing(model, tokenizer):
    with pytest.raises(MethodError, match=r"The model is a BertTokenizer.*sequence-classification model first"):
        explain(tokenizer, model, "who wrote it", method="saliency")
    with pytest.raises(ExplainerInputError, match="The tokenizer is a NoneType"):
        explain(model, None, "who wrote it", method="saliency")


def test_slow_tokenizer(model):
    slow = BertTokenizerLegacy.from_pretrained(minilm_path())
    assert all("slow tokenizer" in reason for reason in supported_methods(model, slow).values())
    with pytest.raises(ExplainerInputError, match=r"slow tokenizer.*use_fast=True"):
        explain(model, slow, "who wrote it", method="saliency")


@pytest.mark.parametrize(
    ("method", "options", "message"),
    [
        ("saliency", {"n_steps": 5}, r"saliency takes no option \['n_steps'\]"),
        ("integrated_gradients", {"steps": 5}, r"its options are \['baseline', 'integration'"),
        ("integrated_gradients", {"baseline": "noise"}, "baseline='noise': choose one of"),
        ("integrated_gradients", {"integration": "simpson"}, "integration='simpson': choose one of"),
        ("integrated_gradients", {"n_steps": 0}, "n_steps=0 must be at least 1"),
        ("integrated_gradients", {"tolerance": -1.0}, "must be a positive finite number"),
        ("integrated_gradients", {"tolerance": float("nan")}, "tolerance=nan must be a positive finite number"),
        ("integrated_gradients", {"tolerance": float("inf")}, "tolerance=inf must be a positive finite number"),
        ("integrated_gradients", {"max_steps": 0}, "max_steps=0 must be at least 1"),
        ("shap", {"baseline": "unk"}, "baseline='unk'"),
        ("integrated_gradients", {"n_steps": 2.5}, r"n_steps=2.5 has the wrong type \(float\).* expects int"),
        ("shap", {"n_samples": "many"}, r"n_samples='many' has the wrong type \(str\)"),
        ("shap", {"n_samples": 0}, "n_samples=0 must be at least 1"),
        ("shap", {"perturbations_per_eval": 0}, "perturbations_per_eval=0 must be at least 1"),
        ("grad_weighted_attention", {"source": "heads"}, "source='heads'"),
        ("grad_weighted_attention", {"source": "encoder"}, "has no encoder attention; use source='all'"),
    ],
)
def test_bad_options(method, options, message, model, tokenizer):
    with pytest.raises(ExplainerError, match=message):
        explain(model, tokenizer, "who wrote it", method=method, **options)


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ({"who": 1}, r"texts is a dict: pass a str, a pair \(text, text_pair\) or a list"),
        (b"who wrote it", r"texts is bytes, not str: decode it first"),
        (["fine", b"bytes"], "Text 1 is bytes, not str: decode it first"),
        (("one", "two", "three"), "Text 0 is a tuple of 3: a text pair is"),
        ([("fine", 3)], "Text 0 has a second text that is an int, not a str"),
        ((" ", "fine"), "Text 0 has a text that is empty or only whitespace"),
        # Issue 20.10: an empty second text is named as such, not as an empty first text.
        (("fine", " "), "Text 0 has a second text that is empty or only whitespace"),
        # Issue 29.3: a lone surrogate, once the tokenizer's "TextEncodeInput must be Union[...]".
        (
            ["fine", "abc\ud800"],
            r"^Text 1 holds a lone surrogate \(U\+D800 at character 3\), which is not Unicode text: remove it, or "
            r"decode the source with errors='replace'\.$",
        ),
        (("fine", "\udfff"), r"^Text 0 has a second text that holds a lone surrogate \(U\+DFFF at character 0\)"),
    ],
)
def test_texts_of_the_wrong_kind(texts, message, model, tokenizer):
    with pytest.raises(ExplainerInputError, match=message):
        explain(model, tokenizer, texts, method="saliency")
    with pytest.raises(ExplainerInputError, match=message):
        predict(model, tokenizer, texts)


def test_contrast_of_a_class_with_itself(model, tokenizer):
    with pytest.raises(TargetError, match="names class 'class_1' twice"):
        explain(model, tokenizer, "who wrote it", method="integrated_gradients", target=("class_1", 1))


def test_top_k(model, tokenizer):
    texts = ["who wrote it", "a much longer question about who wrote which play"]
    ranked = explain(model, tokenizer, texts, method="label_attention", top_k=2)
    everything = explain(model, tokenizer, texts, method="label_attention", targets="all")
    for top, every in zip(ranked, everything, strict=True):
        order = sorted(every, key=lambda exp: -exp.probability)
        assert [exp.target for exp in top] == [exp.target for exp in order[:2]]
        assert [exp.scores for exp in top] == [exp.scores for exp in order[:2]]
    for bad in (0, 4, 2.0, True):
        with pytest.raises(ExplainerError, match=rf"top_k={bad!r}: give a number of classes from 1 to 3"):
            explain(model, tokenizer, texts, method="saliency", top_k=bad)
    with pytest.raises(ExplainerError, match="only one of target"):
        explain(model, tokenizer, texts, method="saliency", top_k=1, target=0)


def test_words_keep_whole_grapheme_clusters(model, tokenizer):
    """A combining accent or a vowel sign that the tokenizer normalises away stays with its word."""
    text = "cafe\u0301 नमस्ते ❤\ufe0f"
    exp = explain(model, tokenizer, text, method="saliency")
    assert exp.words == ["cafe\u0301", "नमस्ते", "❤\ufe0f"]


def test_predict_texts_and_pairs(model, tokenizer):
    texts = ["who wrote it", ("who wrote it", "a play")]
    predictions = predict(model, tokenizer, texts)
    assert predictions.probabilities.shape == (2, 3) and predictions.probabilities.dtype == torch.float32
    assert predictions.labels == ["class_0", "class_1", "class_2"] and predictions.truncated == [False, False]
    torch.testing.assert_close(predictions.probabilities.sum(-1), torch.ones(2))
    exps = explain(model, tokenizer, texts, method="saliency")
    assert [exp.probability for exp in exps] == pytest.approx(predictions.probabilities.max(-1).values.tolist())


def test_parse_options():
    options = parse_options(["n_steps=50", "baseline=zero", "tolerance=null", "flag=true", "x=1.5", "l=[1, 2]", "s="])
    assert options == {
        "n_steps": 50,
        "baseline": "zero",
        "tolerance": None,
        "flag": True,
        "x": 1.5,
        "l": [1, 2],
        "s": "",
    }
    assert parse_options(["text=a=b"]) == {"text": "a=b"}
    for bad in ("n_steps", "=5", "two words=1"):
        with pytest.raises(ExplainerError, match="is not KEY=VALUE"):
            parse_options([bad])


def test_cost_hints():
    assert cost_hints("integrated_gradients") == {
        "option": "n_steps",
        "default": 9,
        "caps": {"n_steps": 64, "max_steps": 64},
    }
    assert cost_hints("saliency") == {"option": None, "default": None, "caps": {}}
    for method in METHODS:
        hints = cost_hints(method)
        assert hints["option"] is None or hints["option"] in {o.name for o in METHODS[method].all_options()}
    with pytest.raises(MethodError, match="Unknown method 'lime'"):
        cost_hints("lime")


def test_supported_methods_of_labelattn_models(tokenizer):
    embedding = supported_methods(make_model("embedding", pooling="mean"))
    assert {name for name, reason in embedding.items() if reason} == {
        "attention_rollout",
        "attention_flow",
        "grad_weighted_attention",
        "label_attention",
        "label_attention_weights",
    }
    assert not any(supported_methods(make_model("encoder")).values())


def test_explanation_from_dict(model, tokenizer):
    for given in ("who wrote it", ("who wrote it", "a play by cafe\u0301")):
        exp = explain(model, tokenizer, given, method="integrated_gradients", n_steps=4, tolerance=None)
        data = json.loads(json.dumps(exp.to_dict()))
        assert Explanation.from_dict(data) == exp
    data = exp.to_dict()
    for change, message in [
        ({"spans": "notalist"}, "field spans"),
        ({"scores": [0.1]}, "1 scores for 7 words"),
        ({"scores": [float("nan")] * 7}, "field scores"),
        ({"target_label": 3}, "field target_label"),
        ({"probability": 1.5}, r"probability=1.5 is not in \[0, 1\]"),
        ({"word_segments": None}, "text_pair and word_segments come together"),
        ({"spans": [[0, 3]] * 7}, "word 1 'wrote' is not at its span"),
        ({"colour": "red"}, r"unknown \['colour'\]"),
    ]:
        with pytest.raises(ExplainerInputError, match=message):
            Explanation.from_dict({**data, **change})
    with pytest.raises(ExplainerInputError, match="missing"):
        Explanation.from_dict({"text": "who"})


def test_errors_are_value_errors():
    for error in (ExplainerError, ExplainerInputError, TargetError, MethodError):
        assert issubclass(error, ValueError)


# --- the result and its views ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["integrated_gradients", "label_attention", "shap"])
def test_words_spans_and_views(method, model, tokenizer):
    exp = explain(model, tokenizer, TEXT, method=method, target=("class_1", 0) if method == "shap" else None)
    assert exp.words == [TEXT[start:end] for start, end in exp.spans]
    assert "unbelievably" in exp.words and "Héllo" in exp.words  # words of several sub-tokens stay whole
    assert not {"[CLS]", "[SEP]", "[PAD]"} & set(exp.words)
    assert len(exp.scores) == len(exp.words)

    data = json.loads(json.dumps(exp.to_dict()))
    assert data["words"] == exp.words and data["spans"] == [list(s) for s in exp.spans]
    assert data["method"] == method and data["target_label"] == exp.target_label

    pieces = exp.segments()
    assert "".join(piece for piece, _ in pieces) == TEXT
    values = [value for _, value in pieces if value is not None]
    assert len(values) == len(exp.words)
    assert all(-1.0 <= v <= 1.0 for v in values) and max(abs(v) for v in values) == pytest.approx(1.0)
    # Signs survive the scaling: it divides by the largest magnitude, never softmax-normalises.
    assert [v > 0 for v in values] == [s > 0 for s in exp.scores]

    snippet = exp.to_html()
    assert "&lt;" in snippet and "&gt;" in snippet and "<b>bold" not in snippet  # the text's markup is escaped


def test_plot(model, tokenizer):
    import matplotlib

    matplotlib.use("Agg")
    exp = explain(model, tokenizer, "who wrote hamlet", method="label_attention")
    figure = exp.plot()
    assert figure.axes[0].get_images()[0].get_array().shape == (3, 3)  # classes × words


# --- the CLI -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory, tokenizer, model):
    return save_model(model, tokenizer, tmp_path_factory.mktemp("model"))


def test_cli_explain(saved_model, tmp_path, capsys):
    page = tmp_path / "out.html"
    code = main(
        [
            "explain",
            str(saved_model),
            "Who wrote Hamlet ?",
            "--method",
            "shap",
            "--option",
            "n_samples=3",
            "--target",
            "class_1",
            "--contrast",
            "0",
            "--html",
            str(page),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "shap · class_1" in out and "rather than class_0" in out
    assert "Hamlet +" in out or "Hamlet -" in out
    assert "Hamlet" in page.read_text() and page.read_text().startswith("<!doctype html>")


def test_cli_all_targets(saved_model, capsys):
    assert (
        main(["explain", str(saved_model), "Who wrote Hamlet ?", "--method", "label_attention", "--all-targets"]) == 0
    )
    out = capsys.readouterr().out
    assert all(f"label_attention · class_{i}" in out for i in range(3))


def test_cli_examples_from_the_default_data_set(saved_model, capsys):
    assert main(["explain", str(saved_model), "--examples", "2", "--method", "random"]) == 0
    out = capsys.readouterr().out
    assert out.count("random · class_") == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "no/such/folder", "hi"], "No model folder at no/such/folder"),
        (["explain", "{model}"], "Nothing to explain"),
        (["explain", "{model}", "hi", "--method", "lime"], "Unknown method 'lime'"),
        (["explain", "{model}", "hi", "--option", "n_steps"], "not KEY=VALUE"),
        (["explain", "{model}", "hi", "--contrast", "0"], "--contrast needs --target"),
        (["explain", "{model}", "hi", "--target", "nope"], "Unknown target label 'nope'"),
    ],
)
def test_cli_errors(argv, message, saved_model, capsys):
    assert main([a.replace("{model}", str(saved_model)) for a in argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "id2label, expected",
    [({0: "A", 1: "A", 2: "B"}, "several classes one name"), ({0: "A", 1: "B", 5: "C"}, "has no name")],
)
def test_a_model_built_in_python_with_a_bad_label_map_is_refused_as_a_loaded_one(tokenizer, id2label, expected):
    from explainers.loading import LoadError

    model = make_model("embedding", num_labels=3)
    model.config.id2label = id2label
    with pytest.raises(LoadError, match=expected):
        explain(model, tokenizer, "a text", method="saliency")
    with pytest.raises(LoadError, match=expected):
        predict(model, tokenizer, ["a text"])
