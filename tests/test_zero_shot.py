"""Zero-shot classifiers: a tiny NLI model trained here (a text entails "This example is animals." exactly when it holds
"zebra", and "... music." when it holds "guitar"), explained through `pipeline("zero-shot-classification")`."""

import copy
import random

import pytest
import torch
from conftest import FILLER, tiny_encoder_config
from test_any_classifier import FAMILIES, build_model, build_tokenizer
from transformers import BartConfig, BartForSequenceClassification, BertForSequenceClassification, pipeline

from explainers import ExplainerError, ExplainerInputError, MethodError, explain, predict
from explainers.evaluation.faithfulness import evaluate_faithfulness
from explainers.words import collate, tokenize
from explainers.zero_shot import DEFAULT_TEMPLATE, ZeroShotClassifier, explain_zero_shot, wants_zero_shot

pytestmark = pytest.mark.usefixtures("one_thread")

KEYWORDS = {"animals": "zebra", "music": "guitar", "sports": None}
LABELS = list(KEYWORDS)
NLI_LABELS = ["contradiction", "neutral", "entailment"]
NLI_NAMES = {"id2label": dict(enumerate(NLI_LABELS)), "label2id": {name: i for i, name in enumerate(NLI_LABELS)}}
# A text with both planted words, and texts of other lengths with one, the other or neither.
BOTH = "the zebra was by the water when she had a guitar"
TEXTS = [BOTH, "many people like to sound the guitar", "a zebra", "some of them were out"]


def nli_texts(n: int, seed: int) -> list[str]:
    """Texts of 4-12 filler words; text i holds "zebra" when bit 0 of i is set and "guitar" when bit 1 is."""
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        words = rng.sample(FILLER, rng.randint(4, 12))
        for bit, keyword in enumerate(("zebra", "guitar")):
            if i >> bit & 1:
                words.insert(rng.randrange(len(words) + 1), keyword)
        texts.append(" ".join(words))
    return texts


def nli_pairs(tokenizer, texts: list[str]) -> tuple[dict, torch.Tensor]:
    """Every (text, hypothesis of a label) pair and its NLI class: entailment when the text holds the label's
    keyword, else contradiction."""
    first = [text for text in texts for _ in LABELS]
    second = [DEFAULT_TEMPLATE.format(label) for _ in texts for label in LABELS]
    classes = [
        NLI_LABELS.index("entailment" if KEYWORDS[label] in text.split() else "contradiction")
        for text in texts
        for label in LABELS
    ]
    return tokenizer(first, second, padding=True, return_tensors="pt"), torch.tensor(classes)


def train_nli(tokenizer, steps: int = 150, max_rounds: int = 4) -> BertForSequenceClassification:
    """A 2-layer BERT trained on the planted pairs until it gets every held-out pair right. The word embeddings stay
    as initialised: random vectors of one scale tell the words apart, and trained ones grow for the planted words,
    which shrinks their gradients through the LayerNorm that follows (saliency then ranks them lower)."""
    torch.manual_seed(0)
    config = tiny_encoder_config(
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        **NLI_NAMES,
    )
    model = BertForSequenceClassification(config)
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)  # 3e-3 oscillates
    held_out = nli_pairs(tokenizer, nli_texts(64, seed=7))
    # Rounds of `steps` steps until every held-out pair is right: the same seed ends a few steps apart on machines
    # whose float kernels round differently, so a fixed step count would pass on one and fail on another.
    for round_ in range(max_rounds):
        texts = nli_texts(32 * steps, seed=1 + round_)
        model.train()
        for step in range(steps):
            inputs, classes = nli_pairs(tokenizer, texts[32 * step : 32 * (step + 1)])
            loss = model(**inputs, labels=classes).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(**held_out[0]).logits.argmax(-1) == held_out[1]).float().mean().item()
        if accuracy == 1.0:
            break
    assert accuracy == 1.0, f"the NLI model did not learn its rule in {max_rounds * steps} steps ({accuracy:.3f})"
    return model


@pytest.fixture(scope="module")
def nli(tokenizer, one_thread):
    return train_nli(tokenizer)


@pytest.fixture(scope="module")
def zero_shot(nli, tokenizer):
    return pipeline("zero-shot-classification", model=nli, tokenizer=tokenizer)


def pipeline_scores(zero_shot, texts: list[str], labels, **kwargs) -> torch.Tensor:
    """`(texts, labels)` the pipeline's scores, in the order of `labels`."""
    rows = []
    for text in texts:
        out = zero_shot(text, candidate_labels=labels, **kwargs)
        rows.append([out["scores"][out["labels"].index(label)] for label in labels])
    return torch.tensor(rows)


def nli_logits(model, tokenizer, text: str, hypothesis: str, baseline: bool = False) -> torch.Tensor:
    """The NLI model's logits of the pipeline's encoding of (text, hypothesis); with `baseline`, every token of the
    text's words replaced by the padding token (special tokens and the hypothesis kept)."""
    pair = tokenizer(text, hypothesis, return_tensors="pt")
    if baseline:
        is_text = torch.tensor([segment == 0 for segment in pair.sequence_ids(0)])
        pair["input_ids"] = pair["input_ids"].masked_fill(is_text, tokenizer.pad_token_id)
    with torch.no_grad():
        return model(**pair).logits[0]


def pipeline_output(logits: torch.Tensor, output: str, multi_label: bool) -> torch.Tensor:
    """`(labels,)` the explained number of each label, in the pipeline's terms, from the NLI logits `(labels, 3)` of
    the labels' pairs: its entailment logit (minus the labels' mean: centered), log-score or score, where a label's
    score is the softmax of the entailment logits over the labels; for multi-label, the log-odds of entailment
    against contradiction, the log of its score or its score, the softmax of [contradiction, entailment]."""
    entailment, contradiction = NLI_LABELS.index("entailment"), NLI_LABELS.index("contradiction")
    if multi_label:
        pairs = torch.log_softmax(logits[:, [contradiction, entailment]], dim=-1)[:, 1]
        values = {"logit": logits[:, entailment] - logits[:, contradiction], "log_probability": pairs}
    else:
        values = {
            "logit": logits[:, entailment],
            "centered_logit": logits[:, entailment] - logits[:, entailment].mean(),
            "log_probability": torch.log_softmax(logits[:, entailment], dim=-1),
        }
    values["probability"] = values["log_probability"].exp()
    return values[output]


# --- the pipeline's scores -----------------------------------------------------------------------------------


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize(
    ("labels", "template"),
    [(LABELS, DEFAULT_TEMPLATE), (["music", "animals"], "The topic of it: {}!"), (["sports"], DEFAULT_TEMPLATE)],
)
def test_probabilities_are_the_pipelines_scores(zero_shot, tokenizer, multi_label, labels, template):
    """`predict` and every explanation give the pipeline's scores: softmax of the entailment logits over the labels,
    or each label's entailment-vs-contradiction softmax (multi-label, and always for one label). The texts are
    batched, of different lengths."""
    expected = pipeline_scores(zero_shot, TEXTS, labels, hypothesis_template=template, multi_label=multi_label)
    classifier = ZeroShotClassifier(
        zero_shot, candidate_labels=labels, hypothesis_template=template, multi_label=multi_label
    )
    assert classifier.multi_label == (multi_label or len(labels) == 1)
    predictions = predict(classifier, tokenizer, TEXTS)
    assert predictions.labels == labels
    torch.testing.assert_close(predictions.probabilities, expected, rtol=0, atol=1e-5)
    explanations = explain_zero_shot(
        zero_shot, None, TEXTS, labels, hypothesis_template=template, multi_label=multi_label, method="saliency"
    )
    probabilities = torch.tensor([[e.probability for e in per_text] for per_text in explanations])
    torch.testing.assert_close(probabilities, expected, rtol=0, atol=1e-5)


def test_labels_compete_without_multi_label(zero_shot):
    """The model was taught each label on its own; with `multi_label=False` a text holding both planted words shares
    the probability between their labels, while each is near-certain on its own yes/no."""
    single = pipeline_scores(zero_shot, [BOTH], LABELS)[0]
    multi = pipeline_scores(zero_shot, [BOTH], LABELS, multi_label=True)[0]
    assert single.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert multi[:2].min() > 0.9 and single[:2].max() < 0.6


def test_comma_separated_labels_are_read_as_the_pipeline_reads_them(zero_shot):
    classifier = ZeroShotClassifier(zero_shot, candidate_labels=" animals,music , sports,")
    assert classifier.candidate_labels == LABELS
    assert classifier.hypotheses == [DEFAULT_TEMPLATE.format(label) for label in LABELS]


def test_entailment_class_is_found_as_the_pipeline_finds_it(nli, tokenizer):
    """The same NLI model with its classes in another order and upper-case names (entailment first, so that the
    pipeline takes the last class as contradiction): same entailment class as the pipeline, same scores as before."""
    order = [2, 1, 0]  # ENTAILMENT, NEUTRAL, CONTRADICTION
    names = [NLI_LABELS[i].upper() for i in order]
    permuted = copy.deepcopy(nli)
    permuted.config.id2label, permuted.config.label2id = dict(enumerate(names)), {n: i for i, n in enumerate(names)}
    with torch.no_grad():
        permuted.classifier.weight.copy_(nli.classifier.weight[order])
        permuted.classifier.bias.copy_(nli.classifier.bias[order])
    reordered = pipeline("zero-shot-classification", model=permuted, tokenizer=tokenizer)
    for multi_label in (False, True):
        classifier = ZeroShotClassifier(reordered, candidate_labels=LABELS, multi_label=multi_label)
        assert (classifier.entailment_id, classifier.contradiction_id) == (reordered.entailment_id, 2)
        expected = pipeline_scores(reordered, TEXTS, LABELS, multi_label=multi_label)
        original = predict(
            ZeroShotClassifier(nli, tokenizer, candidate_labels=LABELS, multi_label=multi_label), tokenizer, TEXTS
        )
        torch.testing.assert_close(predict(classifier, tokenizer, TEXTS).probabilities, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(original.probabilities, expected, rtol=0, atol=1e-5)


# --- the explanations ----------------------------------------------------------------------------------------


def top_word(explanation) -> str:
    return explanation.words[max(range(len(explanation.words)), key=explanation.scores.__getitem__)]


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("method", ["integrated_gradients", "saliency", "shap"])
def test_planted_word_is_the_top_word_of_its_label(zero_shot, method, multi_label):
    """In texts holding one planted word, it is the top word for its label; Integrated Gradients and SHAP, signed,
    also tell the two apart in a text holding both ("zebra" for "animals", "guitar" for "music"). Gradient × input is
    checked against the gradient itself below: on a BERT it ranks nothing (see there)."""
    texts = [text for i, text in enumerate(nli_texts(8, seed=5)) if i % 4 in (1, 2)]
    if method != "saliency":
        texts.append(BOTH)
    for per_text in explain_zero_shot(zero_shot, None, texts, LABELS, multi_label=multi_label, method=method):
        assert [e.target_label for e in per_text] == LABELS
        for explanation in per_text[:2]:
            keyword = KEYWORDS[explanation.target_label]
            if keyword in explanation.words:
                assert top_word(explanation) == keyword, (method, explanation.target_label, explanation.top_words(3))


@pytest.mark.parametrize("multi_label", [False, True])
def test_gradients_are_the_nli_models_on_the_pair(zero_shot, nli, tokenizer, multi_label):
    """Saliency and gradient × input of each label are the NLI model's gradient of the label's logit with respect to
    the text's word embeddings in the pipeline's (text, hypothesis) encoding.

    This is what gradient × input can be tested on: BERT's embeddings are summed and LayerNorm-ed, which makes the
    model blind to their scale, so `∇F · e_word = −∇F · (e_position + e_type)` exactly: a word's gradient × input
    says where it stands, not what it is, and a planted word need not rank first."""
    options = {"multi_label": multi_label, "output": "logit"}
    saliency = explain_zero_shot(zero_shot, None, BOTH, LABELS, method="saliency", **options)
    times_input = explain_zero_shot(zero_shot, None, BOTH, LABELS, method="input_x_gradient", **options)
    embeddings = nli.get_input_embeddings()
    for label, norms, products in zip(LABELS, saliency, times_input, strict=True):
        pair = tokenizer(BOTH, DEFAULT_TEMPLATE.format(label), return_tensors="pt")
        words = embeddings(pair.pop("input_ids")).detach().requires_grad_()
        logits = nli(inputs_embeds=words, **pair).logits[0]
        (gradient,) = torch.autograd.grad(pipeline_output(logits[None], "logit", multi_label)[0], words)
        is_text = [segment == 0 for segment in pair.sequence_ids(0)]
        expected_norms = gradient[0, is_text].norm(dim=-1)
        expected_products = (gradient * words.detach())[0, is_text].sum(-1)
        scale = float(expected_norms.max())
        assert norms.scores == pytest.approx(expected_norms.tolist(), abs=1e-5 * scale)
        assert products.scores == pytest.approx(expected_products.tolist(), abs=1e-5 * scale)
        # The identity that makes gradient × input rank positions on a BERT.
        bert = nli.bert.embeddings
        rest = bert.position_embeddings.weight[: words.shape[1]] + bert.token_type_embeddings(pair["token_type_ids"])
        where = -(gradient * rest.detach())[0, is_text].sum(-1)
        assert where.tolist() == pytest.approx(expected_products.tolist(), abs=1e-3 * float(where.abs().max()))


@pytest.mark.parametrize(
    ("multi_label", "output"),
    [(False, o) for o in ("logit", "centered_logit", "log_probability", "probability")]
    + [(True, o) for o in ("logit", "log_probability", "probability")],
)
def test_integrated_gradients_explains_each_output_as_the_pipeline_defines_it(
    zero_shot, nli, tokenizer, multi_label, output
):
    """Per label: F(x) is the output asked for, as the pipeline defines the label's score (see `pipeline_output`),
    F(x′) the same with the text's words removed from every pair and the hypotheses kept, and the word scores add
    up to F(x) − F(x′) within the reported delta, which meets the default tolerance."""
    explanations = explain_zero_shot(zero_shot, None, BOTH, LABELS, multi_label=multi_label, output=output)
    hypotheses = [DEFAULT_TEMPLATE.format(label) for label in LABELS]
    assert [e.extras["hypothesis"] for e in explanations] == hypotheses
    ends = [
        pipeline_output(
            torch.stack([nli_logits(nli, tokenizer, BOTH, h, baseline) for h in hypotheses]), output, multi_label
        )
        for baseline in (False, True)
    ]
    for explanation, score, baseline in zip(explanations, *ends, strict=True):
        assert explanation.output == output
        scale = abs(float(score)) + abs(float(baseline))
        assert explanation.score == pytest.approx(float(score), abs=1e-5 * scale)
        assert explanation.baseline_score == pytest.approx(float(baseline), abs=1e-5 * scale)
        difference = explanation.score - explanation.baseline_score
        assert sum(explanation.scores) - difference == pytest.approx(explanation.delta, abs=1e-5 * scale)
        assert abs(explanation.delta) <= 0.01 * abs(difference)


def test_words_are_the_texts_only(zero_shot, tokenizer):
    """One explanation per label over the text's words: nothing of the hypothesis, no second segment."""
    explanations = explain_zero_shot(zero_shot, None, TEXTS, LABELS, method="input_x_gradient")
    for text, per_text in zip(TEXTS, explanations, strict=True):
        assert [e.target for e in per_text] == [0, 1, 2]
        for explanation in per_text:
            assert explanation.text == text and explanation.text_pair is None and explanation.word_segments is None
            assert explanation.words == text.split()
            assert [text[a:b] for a, b in explanation.spans] == explanation.words
    # One label explained, by name, as `explain` takes targets.
    (only,) = explain_zero_shot(zero_shot, None, [BOTH], LABELS, target="music", method="saliency")
    assert only.target_label == "music" and only.extras["hypothesis"] == "This example is music."


def test_batched_texts_are_explained_as_alone(zero_shot):
    """Texts of different lengths in one batch get the scores they get alone (the pairs are built per row)."""
    together = explain_zero_shot(zero_shot, None, TEXTS, LABELS, method="integrated_gradients", tolerance=None)
    for text, per_text in zip(TEXTS, together, strict=True):
        alone = explain_zero_shot(zero_shot, None, text, LABELS, method="integrated_gradients", tolerance=None)
        for a, b in zip(per_text, alone, strict=True):
            scale = max(abs(s) for s in b.scores)
            assert a.scores == pytest.approx(b.scores, abs=1e-4 * scale)


def test_texts_padded_on_either_side_give_the_same_logits(zero_shot, tokenizer):
    """The pairs are made from each row's real tokens, wherever its padding is."""
    classifier = ZeroShotClassifier(zero_shot, candidate_labels=LABELS)
    items = tokenize(tokenizer, TEXTS, 128)
    with torch.no_grad():
        right, left = (
            classifier(**collate(items, tokenizer.pad_token_id, left=side).model_inputs()) for side in (0, 1)
        )
    torch.testing.assert_close(left.logits, right.logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_gives_the_pipelines_scores(family):
    """NLI models of every family the explainers cover (random weights of a realistic scale), each with a tokenizer of
    its kind: the pairs made from a text's tokens give the pipeline's scores, and Integrated Gradients is complete
    through them. Their tokenizers join a pair in every
    way there is (`[SEP] B [SEP]`, `</s></s> B </s>`, `<s> B`, nothing at all: GPT-2), and the decoders (GPT-2,
    Llama) are padded on the left."""
    tokenizer = build_tokenizer(FAMILIES[family][1])
    model = build_model(family, tokenizer)
    model.config.id2label, model.config.label2id = NLI_NAMES["id2label"], NLI_NAMES["label2id"]
    zero_shot = pipeline("zero-shot-classification", model=model, tokenizer=tokenizer)
    texts = ["who wrote it", "a short one", " ".join(FILLER[:20])]
    for multi_label in (False, True):
        classifier = ZeroShotClassifier(zero_shot, candidate_labels=LABELS, multi_label=multi_label)
        assert classifier.pads_left == (family in ("gpt2", "llama"))
        expected = pipeline_scores(zero_shot, texts, LABELS, multi_label=multi_label)
        assert expected.max() - expected.min() > 0.05  # the scores differ: the comparison means something
        torch.testing.assert_close(predict(classifier, tokenizer, texts).probabilities, expected, rtol=0, atol=1e-5)
    # Integrated Gradients through the pairs, as test_any_classifier holds every family to: within the default
    # tolerance, or at the most steps it may take.
    for explanation in explain_zero_shot(zero_shot, None, texts[0], LABELS):
        difference = explanation.score - explanation.baseline_score
        assert abs(explanation.delta) <= 0.01 * abs(difference) or explanation.extras["n_steps"] == 256


def test_faithfulness_is_measured_on_the_classifier(zero_shot, tokenizer):
    """The faithfulness measures run on the classifier like on any model: removing the words Integrated Gradients
    ranks first costs the label more probability than removing random words."""
    classifier = ZeroShotClassifier(zero_shot, candidate_labels=LABELS)
    texts = [text for i, text in enumerate(nli_texts(8, seed=5)) if i % 4 in (1, 2)]
    runs = {
        method: explain(classifier, tokenizer, texts, method=method) for method in ("integrated_gradients", "random")
    }
    reports = evaluate_faithfulness(classifier, tokenizer, runs, percentages=(10, 20, 50), tau_loo=False)
    assert (
        reports["integrated_gradients"].summary()["comprehensiveness"]
        > reports["random"].summary()["comprehensiveness"] + 0.2
    )


def test_the_classifier_is_explained_by_explain_unchanged(zero_shot, tokenizer):
    """`explain(ZeroShotClassifier(...), tokenizer, text)` is a plain classifier's explanation: the predicted label."""
    classifier = ZeroShotClassifier(zero_shot, candidate_labels=LABELS)
    explanation = explain(classifier, tokenizer, "a zebra and the water", method="saliency")
    assert explanation.target_label == "animals"


# --- what is refused -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"candidate_labels": None}, "candidate_labels is missing"),
        ({"candidate_labels": []}, "candidate_labels is empty"),
        ({"candidate_labels": " , "}, "candidate_labels is empty"),
        ({"candidate_labels": ""}, "candidate_labels is empty"),
        ({"candidate_labels": {"animals": 1}}, "candidate_labels is a dict"),
        ({"candidate_labels": ["animals", 3]}, "Candidate label 1 is an int"),
        ({"candidate_labels": ["animals", "  "]}, "Candidate label 1 is empty"),
        ({"candidate_labels": ["music", "animals", "music"]}, r"\['music'\] are given twice"),
        ({"hypothesis_template": "This example is a label."}, "has no {} for the label"),
        ({"hypothesis_template": "This example is {label}."}, "cannot take a label"),
        ({"hypothesis_template": "{} and {}"}, "cannot take a label"),
        ({"hypothesis_template": ""}, "hypothesis_template is empty"),
        ({"hypothesis_template": None}, "hypothesis_template is missing"),
        ({"multi_label": "yes"}, "multi_label='yes': give True or False"),
    ],
)
def test_bad_labels_and_templates_are_refused(zero_shot, options, match):
    arguments = {"candidate_labels": LABELS, **options}
    with pytest.raises(ExplainerInputError, match=match):
        explain_zero_shot(zero_shot, None, BOTH, **arguments)


def test_other_pipelines_and_models_are_refused(nli, tokenizer, zero_shot):
    classify = pipeline("text-classification", model=nli, tokenizer=tokenizer)
    with pytest.raises(MethodError, match=r"'text-classification' pipeline.*zero-shot-classification"):
        explain_zero_shot(classify, None, BOTH, LABELS)
    no_entailment = BertForSequenceClassification(tiny_encoder_config(num_labels=3)).eval()
    with pytest.raises(MethodError, match=r"no entailment class \(its labels are \['LABEL_0'"):
        ZeroShotClassifier(no_entailment, tokenizer, candidate_labels=LABELS)
    bart = BartForSequenceClassification(
        BartConfig(
            vocab_size=tokenizer.vocab_size,
            d_model=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            **NLI_NAMES,
        )
    ).eval()
    with pytest.raises(MethodError, match="BartForSequenceClassification cannot run on input embeddings"):
        ZeroShotClassifier(bart, tokenizer, candidate_labels=LABELS)
    with pytest.raises(MethodError, match="attends once per \\(text, hypothesis\\) pair"):
        explain_zero_shot(zero_shot, None, BOTH, LABELS, method="attention_rollout")


def test_pairs_are_refused(zero_shot, tokenizer):
    with pytest.raises(ExplainerInputError, match="reads single texts"):
        explain_zero_shot(zero_shot, None, [BOTH, ("a text", "a pair")], LABELS)
    classifier = ZeroShotClassifier(zero_shot, candidate_labels=LABELS)
    with pytest.raises(ExplainerInputError, match="reads single texts"):
        explain(classifier, tokenizer, ("a text", "a pair"), method="saliency")


def test_zero_shot_calls_are_recognised(zero_shot, nli):
    assert wants_zero_shot(zero_shot, {})
    assert wants_zero_shot(nli, {"candidate_labels": LABELS})
    assert not wants_zero_shot(nli, {"n_steps": 8})


def test_explain_takes_a_zero_shot_pipeline(zero_shot):
    """`explain(zero_shot_pipeline, None, text, candidate_labels=...)` is `explain_zero_shot`, and without candidate
    labels it is refused rather than explaining the NLI model's own classes on the text alone."""
    direct = explain_zero_shot(zero_shot, None, BOTH, LABELS, method="saliency")
    through = explain(zero_shot, None, BOTH, method="saliency", candidate_labels=LABELS)
    assert [e.to_dict() for e in through] == [e.to_dict() for e in direct]
    with pytest.raises(ExplainerError, match="candidate_labels"):
        explain(zero_shot, None, BOTH, method="saliency")
