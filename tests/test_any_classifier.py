"""The explainers on any transformers sequence classifier: one tiny random model per family, built from a config,
with a tokenizer of its kind (WordPiece, byte-level BPE, Unigram/SentencePiece) built here from a small corpus.

Nothing is downloaded. Weights get a realistic scale (as `conftest.make_model` does), so that logits differ by
O(1) and tolerances mean something.
"""

import math
import random
import re
from collections import Counter

import pytest
import regex
import torch
import transformers
from conftest import FILLER, PLANTED_WORD, fit_planted, planted_texts
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast, pipeline

from explainers import (
    METHODS,
    ExplainerError,
    ExplainerInputError,
    MethodError,
    explain,
    predict,
    supported_methods,
    token_limit,
    words,
)
from explainers.base import predict_logits
from explainers.evaluation.faithfulness import evaluate_faithfulness
from explainers.models import baseline_token_id, check_finite_logits, readout
from explainers.words import kept_prefix, tokenize, tokenized_text

pytestmark = pytest.mark.usefixtures("one_thread")

CORPUS = [" ".join(FILLER[i : i + 9]) + f" {PLANTED_WORD}." for i in range(0, len(FILLER), 3)] + [
    "Héllo, wörld!! Don't stop—now: 3.14 e-mails café naïve",
    "नमस्ते दुनिया and 東京 with emoji 👍🏽 and flags",
    "A man is sleeping. Nobody is awake. Is the question answered?",
]
TEXTS = [
    "who wrote it",
    "Héllo,  wörld!! cafe\u0301 नमस्ते 👨\u200d👩\u200d👧 ❤\ufe0f don't stop—now: the " + " ".join(FILLER[:25]),
    "a short one",
]
PAIR = ("A man is sleeping.", "Nobody  is awake, cafe\u0301?")

# family -> (transformers config class, tokenizer kind, config arguments)
FAMILIES = {
    "bert": ("BertConfig", "wordpiece", {}),
    "roberta": ("RobertaConfig", "bpe_roberta", {}),
    "distilbert": (
        "DistilBertConfig",
        "wordpiece_no_types",
        {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
    ),
    "deberta-v2": (
        "DebertaV2Config",
        "unigram_cls",
        {
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "position_biased_input": False,
            "type_vocab_size": 2,
        },
    ),
    "electra": ("ElectraConfig", "wordpiece", {"embedding_size": 32}),
    "xlm-roberta": ("XLMRobertaConfig", "unigram_xlmr", {}),
    "albert": ("AlbertConfig", "unigram_cls", {"embedding_size": 16}),
    "modernbert": ("ModernBertConfig", "wordpiece_no_types", {"classifier_pooling": "mean"}),
    "gpt2": ("GPT2Config", "bpe_gpt2", {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 128}),
    "llama": ("LlamaConfig", "unigram_llama", {"num_key_value_heads": 2}),
}
EXPECTED_READOUT = {"modernbert": "mean", "gpt2": "last", "llama": "last"}


# --- tokenizers of the three kinds -------------------------------------------------------------------------


def _assemble(model, specials: list[str], normalizer, pre_tokenizer, decoder) -> Tokenizer:
    tokenizer = Tokenizer(model)
    tokenizer.add_special_tokens(specials)
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer, tokenizer.decoder = pre_tokenizer, decoder
    return tokenizer


def _corpus_words(normalizer, pre_tokenizer) -> Counter:
    """How often each word of `CORPUS` occurs, as `normalizer` and `pre_tokenizer` cut it."""
    return Counter(
        word for line in CORPUS for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line))
    )


# The WordPiece and Unigram vocabularies are built here from the corpus, in sorted order, rather than trained:
# their trainers learn a different vocabulary (WordPiece) or give different ids (Unigram) in every run, even in
# one process and on one thread, because they number tokens in the order of a randomly seeded hash map. Byte-level
# BPE training is reproducible: its 256 byte characters form a sorted initial alphabet, so ties between equally
# frequent pairs break the same way in every run. `test_tokenizers_are_reproducible` holds all three to that.


def _wordpiece(specials: list[str]) -> Tokenizer:
    """WordPiece over every word of the corpus and every character, alone or as a `##` continuation: a word of the
    corpus is one token, another word is cut greedily into the longest known pieces (`wrote`: `w ##r ##o ##t ##e`)."""
    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    words = sorted(_corpus_words(normalizer, pre_tokenizer))
    characters = sorted(set("".join(words)))
    vocab = [*specials, *characters, *(f"##{c}" for c in characters), *(word for word in words if len(word) > 1)]
    model = models.WordPiece({token: i for i, token in enumerate(vocab)}, unk_token="[UNK]")
    return _assemble(model, specials, normalizer, pre_tokenizer, decoders.WordPiece())


def _bpe(specials: list[str]) -> Tokenizer:
    """Byte-level BPE trained on the corpus (reproducibly: see above)."""
    pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer = _assemble(models.BPE(), specials, None, pre_tokenizer, decoders.ByteLevel())
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tokenizer.train_from_iterator(
        CORPUS * 3, trainers.BpeTrainer(vocab_size=500, special_tokens=specials, initial_alphabet=alphabet)
    )
    return tokenizer


def _unigram(specials: list[str]) -> Tokenizer:
    """Unigram (SentencePiece) over the corpus words with their `▁`, punctuation marks and characters, each scored
    by the log of its frequency: a word of the corpus is one piece, another word is spelled in characters."""
    normalizer = normalizers.NFKC()
    metaspace = {"replacement": "▁", "prepend_scheme": "always"}
    pre_tokenizer = pre_tokenizers.Metaspace(**metaspace)
    # Cut at punctuation too, so that the corpus's "zebra." gives the piece "▁zebra".
    words = _corpus_words(normalizer, pre_tokenizers.Sequence([pre_tokenizer, pre_tokenizers.Punctuation()]))
    pieces = words + Counter("".join(word * count for word, count in words.items()))
    total = sum(pieces.values())
    vocab = [(token, 0.0) for token in specials] + [(p, math.log(n / total)) for p, n in sorted(pieces.items())]
    model = models.Unigram(vocab, unk_id=specials.index("<unk>"), byte_fallback=False)
    return _assemble(model, specials, normalizer, pre_tokenizer, decoders.Metaspace(**metaspace))


def _template(tokenizer: Tokenizer, single: str, pair: str, specials: list[str]) -> None:
    tokenizer.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(token, tokenizer.token_to_id(token)) for token in specials]
    )


def _wrap(tokenizer: Tokenizer, types: bool, **special_tokens) -> PreTrainedTokenizerFast:
    names = ["input_ids", "token_type_ids", "attention_mask"] if types else ["input_ids", "attention_mask"]
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_input_names=names, **special_tokens)


def build_tokenizer(kind: str) -> PreTrainedTokenizerFast:
    """A fast tokenizer of `kind`, with a vocabulary of `CORPUS` and the special tokens of the models that use it."""
    if kind.startswith("wordpiece"):
        tokenizer = _wordpiece(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        _template(tokenizer, "[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1", ["[CLS]", "[SEP]"])
        return _wrap(
            tokenizer,
            kind == "wordpiece",
            pad_token="[PAD]",
            unk_token="[UNK]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
        )
    if kind.startswith("bpe"):
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] if kind == "bpe_roberta" else ["<|endoftext|>"]
        tokenizer = _bpe(specials)
        if kind == "bpe_roberta":
            tokenizer.post_processor = processors.RobertaProcessing(
                ("</s>", tokenizer.token_to_id("</s>")), ("<s>", tokenizer.token_to_id("<s>")), trim_offsets=True
            )
            return _wrap(
                tokenizer,
                False,
                bos_token="<s>",
                eos_token="</s>",
                pad_token="<pad>",
                unk_token="<unk>",
                mask_token="<mask>",
            )
        # GPT-2: no special token added, no padding token, offsets that include the space before a word.
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
        end = "<|endoftext|>"
        return _wrap(tokenizer, False, bos_token=end, eos_token=end, unk_token=end)
    tokenizer = _unigram(["<pad>", "<unk>", "<s>", "</s>", "[CLS]", "[SEP]", "[MASK]"])
    if kind == "unigram_xlmr":
        _template(tokenizer, "<s> $A </s>", "<s> $A </s> </s> $B </s>", ["<s>", "</s>"])
        return _wrap(tokenizer, False, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    if kind == "unigram_llama":
        # Llama: a begin-of-text token, no padding token, padding on the left.
        _template(tokenizer, "<s> $A", "<s> $A <s>:1 $B:1", ["<s>"])
        wrapped = _wrap(tokenizer, False, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
        wrapped.padding_side = "left"
        return wrapped
    _template(tokenizer, "[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1", ["[CLS]", "[SEP]"])
    return _wrap(
        tokenizer,
        True,
        pad_token="<pad>",
        unk_token="<unk>",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def build_model(
    family: str, tokenizer: PreTrainedTokenizerFast, num_labels: int = 3, seed: int = 0, rescale: bool = True
):
    """A 2-layer, width-32 classifier of `family` for `tokenizer`, in eval mode, weights of a realistic scale
    (or transformers' own initialisation, better to train from, without `rescale`)."""
    config_class, _, extra = FAMILIES[family]
    special_ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id,
        "eos_token_id": tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id,
    }
    if family == "modernbert":
        special_ids.update(cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id)
    arguments = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        num_labels=num_labels,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        **special_ids,
    )
    config = getattr(transformers, config_class)(**{**arguments, **extra})
    torch.manual_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters() if rescale else ():
            if param.dim() > 1 and "norm" not in name.lower():
                param.normal_(0.0, 2.0 / param.shape[-1] ** 0.5)
    return model.eval()


@pytest.fixture(scope="session")
def tokenizers():
    cache = {}

    def get(kind: str) -> PreTrainedTokenizerFast:
        if kind not in cache:
            cache[kind] = build_tokenizer(kind)
        return cache[kind]

    return get


@pytest.fixture(scope="module")
def classifiers(tokenizers):
    cache = {}

    def get(family: str):
        if family not in cache:
            tokenizer = tokenizers(FAMILIES[family][1])
            cache[family] = (build_model(family, tokenizer), tokenizer)
        return cache[family]

    return get


def close(a: list[float], b: list[float], tolerance: float = 1e-5) -> bool:
    """Equal within `tolerance`, relative to the larger scores (absolute for scores below 1)."""
    scale = max([1.0, *map(abs, a), *map(abs, b)])
    return all(abs(x - y) <= tolerance * scale for x, y in zip(a, b, strict=True)) and len(a) == len(b)


def segment_of(exp, i: int) -> str:
    return exp.text if exp.word_segments is None else (exp.text, exp.text_pair)[exp.word_segments[i]]


def assert_words_cover_the_text(exp) -> None:
    """Every word at its span, no whitespace at its edges, whole grapheme clusters, spans in order."""
    previous: dict[int, int] = {}
    for i, (word, (start, end)) in enumerate(zip(exp.words, exp.spans, strict=True)):
        segment = segment_of(exp, i)
        assert segment[start:end] == word and word and word == word.strip()
        bounds = {m.start() for m in regex.finditer(r"\X", segment)} | {len(segment)}
        assert start in bounds and end in bounds, f"{word!r} cuts a grapheme cluster"
        own = exp.word_segments[i] if exp.word_segments else 0
        assert start >= previous.get(own, 0)
        previous[own] = end


@pytest.mark.parametrize("kind", sorted({kind for _, kind, _ in FAMILIES.values()}))
def test_tokenizers_are_reproducible(kind):
    """Built again, a tokenizer is the same (vocabulary, ids, merges, scores), so the models and planted-word runs
    built on it are the same in every run; the planted word, a word of the corpus, is one token after a word."""
    tokenizer = build_tokenizer(kind)
    for _ in range(3):
        assert build_tokenizer(kind).backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()
    last = tokenizer.tokenize(f"the {PLANTED_WORD}")[-1]
    assert tokenizer.convert_tokens_to_string([last]).strip() == PLANTED_WORD, last


# --- every family ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_readout_family_and_capabilities(family, classifiers):
    model, tokenizer = classifiers(family)
    assert readout(model) == EXPECTED_READOUT.get(family, "first")
    support = supported_methods(model, tokenizer)
    assert set(support) == set(METHODS)
    # Any transformers classifier returns attentions and has input embeddings; only label attention is missing.
    assert [name for name, reason in support.items() if reason is not None] == [
        "label_attention",
        "label_attention_weights",
    ]
    # 130 positions; RoBERTa and XLM-R count theirs from padding_idx + 1.
    offset = tokenizer.pad_token_id + 1 if family in ("roberta", "xlm-roberta") else 0
    assert token_limit(model, tokenizer) == 130 - offset


@pytest.mark.parametrize("family", list(FAMILIES))
def test_words_cover_the_text_exactly(family, classifiers):
    model, tokenizer = classifiers(family)
    for exp in explain(model, tokenizer, [*TEXTS, PAIR], method="saliency"):
        assert_words_cover_the_text(exp)
        if "cafe\u0301" in exp.text + (exp.text_pair or ""):
            assert any("cafe\u0301" in word for word in exp.words), exp.words
    hindi = explain(model, tokenizer, "नमस्ते", method="saliency")
    assert hindi.words == ["नमस्ते"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_integrated_gradients_completeness(family, classifiers):
    """The word scores add up to F(x) - F(x') within the reported delta, which the default tolerance holds to 1%
    of F(x) - F(x') (or the steps reached max_steps)."""
    model, tokenizer = classifiers(family)
    for exp in explain(model, tokenizer, [TEXTS[0], PAIR], method="integrated_gradients"):
        difference = exp.score - exp.baseline_score
        assert abs(sum(exp.scores) - difference) <= abs(exp.delta) + 1e-4
        assert abs(exp.delta) <= 0.01 * abs(difference) or exp.extras["n_steps"] == 256


@pytest.mark.parametrize("family", list(FAMILIES))
def test_batched_equals_one_at_a_time(family, classifiers):
    """Texts of 3 and ~50 words in one batch, padded on the model's side, give what each gives alone."""
    model, tokenizer = classifiers(family)
    texts = [*TEXTS, PAIR]
    alone_probabilities = torch.cat([predict(model, tokenizer, text).probabilities for text in texts])
    torch.testing.assert_close(
        predict(model, tokenizer, texts).probabilities, alone_probabilities, atol=1e-5, rtol=1e-5
    )
    for method, options in [
        ("integrated_gradients", {"n_steps": 8, "tolerance": None, "integration": "riemann_trapezoid"}),
        ("saliency", {}),
        ("attention_rollout", {}),
        ("grad_weighted_attention", {}),
    ]:
        together = explain(model, tokenizer, texts, method=method, batch_size=8, **options)
        alone = [explain(model, tokenizer, text, method=method, **options) for text in texts]
        for a, b in zip(together, alone, strict=True):
            assert a.words == b.words and close(a.scores, b.scores), (method, a.text)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_supported_method_runs_and_the_others_say_why(family, classifiers):
    model, tokenizer = classifiers(family)
    fast = {"integrated_gradients": {"n_steps": 4, "tolerance": None}}
    for method, reason in supported_methods(model, tokenizer).items():
        if reason is None:
            exp = explain(model, tokenizer, TEXTS[0], method=method, **fast.get(method, {}))
            assert len(exp.scores) == len(exp.words) == 3 and all(math.isfinite(s) for s in exp.scores)
        else:
            with pytest.raises(MethodError, match=re.escape(reason)):
                explain(model, tokenizer, TEXTS[0], method=method)


@pytest.mark.parametrize("family", ["bert", "roberta", "gpt2", "llama"])
def test_text_pairs(family, classifiers):
    """Words of both segments, tagged and spanned in their own segment; token types of the second segment are 1
    (BERT); every word's removal is measured by faithfulness."""
    model, tokenizer = classifiers(family)
    exp = explain(model, tokenizer, PAIR, method="integrated_gradients", n_steps=8, tolerance=None)
    assert exp.text_pair == PAIR[1]
    assert exp.words == ["a", "man", "is", "sleeping", ".", "nobody", "is", "awake", ",", "café", "?"] or (
        [w.lower() for w in exp.words[:2]] == ["a", "man"] and exp.word_segments.count(1) >= 4
    )
    assert exp.word_segments == sorted(exp.word_segments) and set(exp.word_segments) == {0, 1}
    assert_words_cover_the_text(exp)
    pieces = exp.segments()
    assert "".join(piece for piece, _ in pieces) == PAIR[0] + "\n\n" + PAIR[1]
    assert [piece for piece, value in pieces if value is not None] == exp.words
    item = tokenize(tokenizer, [PAIR], 64)[0]
    if item.token_type_ids is not None:
        second = [t for t, w in zip(item.token_type_ids, item.word_index, strict=True) if w >= 0]
        segments = [exp.word_segments[w] for w in item.word_index if w >= 0]
        assert second == segments
    report = evaluate_faithfulness(model, tokenizer, [exp], percentages=(50, 100))
    assert report.per_text[0].text_pair == PAIR[1] and len(report.per_text[0].loo_drops) == len(exp.words)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_decoder_pools_the_last_token_whatever_the_padding(family, classifiers):
    """The explainers' probabilities are the model's own on each unpadded text, the config gets its padding id
    back, and the baseline token is a real token of the vocabulary."""
    model, tokenizer = classifiers(family)
    saved_pad = model.config.pad_token_id
    own = []
    with torch.no_grad():
        for text in TEXTS:
            own.append(model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1))
    torch.testing.assert_close(predict(model, tokenizer, TEXTS).probabilities, torch.cat(own), atol=1e-5, rtol=1e-5)
    assert model.config.pad_token_id == saved_pad
    assert tokenizer.pad_token_id is None and baseline_token_id(tokenizer) in (
        tokenizer.unk_token_id,
        tokenizer.eos_token_id,
    )
    # The tokenizer's own padding side does not matter.
    side = tokenizer.padding_side
    try:
        tokenizer.padding_side = "right" if side == "left" else "left"
        torch.testing.assert_close(predict(model, tokenizer, TEXTS).probabilities, torch.cat(own), atol=1e-5, rtol=1e-5)
    finally:
        tokenizer.padding_side = side


def test_sdpa_model_gets_its_attention_back(classifiers):
    model, tokenizer = classifiers("bert")
    implementation = model.config._attn_implementation
    explain(model, tokenizer, TEXTS[0], method="attention_rollout")
    assert model.config._attn_implementation == implementation


def test_a_pipeline_in_place_of_model_and_tokenizer(classifiers):
    model, tokenizer = classifiers("roberta")
    classifier = pipeline("text-classification", model=model, tokenizer=tokenizer)
    by_pipeline = explain(classifier, None, TEXTS[0], method="saliency")
    assert by_pipeline.scores == explain(model, tokenizer, TEXTS[0], method="saliency").scores
    assert predict(classifier, None, TEXTS[0]).labels == [model.config.id2label[i] for i in range(3)]
    with pytest.raises(ExplainerInputError, match="pipeline alone"):
        explain(classifier, build_tokenizer("wordpiece"), TEXTS[0], method="saliency")


def test_top_k_on_a_decoder(classifiers):
    model, tokenizer = classifiers("gpt2")
    results = explain(model, tokenizer, TEXTS, method="saliency", top_k=2)
    probabilities = predict(model, tokenizer, TEXTS).probabilities
    for per_text, row in zip(results, probabilities, strict=True):
        assert [exp.target for exp in per_text] == row.argsort(descending=True)[:2].tolist()
        assert per_text[0].probability >= per_text[1].probability
    for bad in (0, 4, True, 1.5):
        with pytest.raises(ExplainerError, match="top_k="):
            explain(model, tokenizer, TEXTS[0], method="saliency", top_k=bad)


def test_non_finite_logits_are_refused(tokenizers):
    tokenizer = tokenizers("wordpiece")
    model = build_model("bert", tokenizer)
    with torch.no_grad():
        model.classifier.weight.fill_(float("nan"))
    with pytest.raises(ExplainerError, match="not finite"):
        explain(model, tokenizer, TEXTS[0], method="saliency")
    with pytest.raises(ExplainerError, match="not finite"):
        predict(model, tokenizer, TEXTS[0])


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_the_rows_named_are_those_with_a_non_finite_logit(value):
    logits = torch.zeros(6, 4)
    logits[1, 3] = logits[4, 0] = value
    with pytest.raises(ExplainerError, match=r"for text\(s\) \[1, 4\]"):
        check_finite_logits(logits)
    check_finite_logits(torch.full((2, 3), torch.finfo(torch.float32).max))  # the largest finite logits pass


def test_padding_side_of_a_logits_helper_is_the_models(classifiers):
    """`predict_logits` with a left-padded decoder batch equals the logits of each text alone."""
    model, tokenizer = classifiers("llama")
    items = tokenize(tokenizer, TEXTS, 128)
    together = predict_logits(model, items, baseline_token_id(tokenizer), batch_size=8)
    alone = torch.cat([predict_logits(model, [item], baseline_token_id(tokenizer), 1) for item in items])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)


# --- planted words: the explainers find what a trained model uses -------------------------------------------


def train_planted(family: str, tokenizer, pairs: bool = False, steps: int = 150):
    """A tiny `family` model trained until the planted word alone decides the class (in the second segment for
    `pairs`), checked on held-out texts."""
    model = build_model(family, tokenizer, num_labels=2, seed=1, rescale=False)

    def inputs(batch: list[str]):
        if pairs:  # the first segment is filler only: the planted word is in the second
            firsts = [" ".join(FILLER[(i * 7) % 50 : (i * 7) % 50 + 4]) for i in range(len(batch))]
            return tokenizer(firsts, batch, padding=True, return_tensors="pt")
        return tokenizer(batch, padding=True, return_tensors="pt")

    return fit_planted(model, inputs, steps, name=family)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "pairs"), [("bert", False), ("roberta", False), ("xlm-roberta", False), ("bert", True)]
)
def test_planted_word_is_found(family, pairs, tokenizers, request):
    """WordPiece, byte-level BPE and Unigram tokenizers, and a text pair whose second segment holds the word:
    Integrated Gradients and SHAP rank the planted word first. The pair uses the MiniLM WordPiece vocabulary: the
    pair case is about segments, not the tokenizer kind."""
    tokenizer = request.getfixturevalue("tokenizer") if pairs else tokenizers(FAMILIES[family][1])
    model = train_planted(family, tokenizer, pairs=pairs)
    texts, labels = planted_texts(6, seed=5)
    texts = [text for text, label in zip(texts, labels, strict=True) if label]
    given = [("the first one of them", text) for text in texts] if pairs else texts
    for method, options in (("integrated_gradients", {}), ("shap", {})):
        for exp in explain(model, tokenizer, given, method=method, target=1, **options):
            top = exp.top_words(1)[0][0]
            assert top.strip(".").lower() == PLANTED_WORD, (method, exp.words, exp.scores)
            if pairs:
                assert exp.word_segments[exp.words.index(top)] == 1


@pytest.mark.parametrize("chars_per_token", [1, 16])
@pytest.mark.parametrize("kind", ["wordpiece", "bpe_roberta", "bpe_gpt2", "unigram_xlmr"])
def test_a_long_text_read_through_its_prefix_is_tokenized_as_the_whole_text(
    tokenizers, monkeypatch, kind, chars_per_token
):
    """A text far longer than the tokens kept is tokenized through a prefix (`kept_prefix`): its tokens, words,
    spans and truncation are the whole text's, wherever the cut falls (in a word, in whitespace, in a cluster of
    marks or an emoji sequence), for the three kinds of tokenizers. One character per token starts the prefixes
    short, so that cuts fall next to the last kept token."""
    monkeypatch.setattr(words, "PREFIX_CHARS_PER_TOKEN", chars_per_token)
    tokenizer = tokenizers(kind)
    rng = random.Random(0)
    pieces = ["zebra", "fern", "granite", "café", "e\u0301", "नमस्ते", "👩\u200d👩\u200d👧", "xyzzyplugh", "?", "1984"]
    gaps = [" ", "", "  ", ". ", "\n", " \u0301"]
    through_prefix = 0
    for _ in range(40):
        text = "".join(rng.choice(pieces) + rng.choice(gaps) for _ in range(rng.randint(150, 400)))
        max_length = rng.choice([6, 9, 17, 33])
        through_prefix += kept_prefix(tokenizer, text, max_length) != text
        encoding = tokenizer([text], truncation=True, max_length=max_length, return_offsets_mapping=True)
        with pytest.warns(UserWarning, match="only its first"):
            assert tokenize(tokenizer, [text], max_length) == [tokenized_text(text, encoding, 0, 0)]
    assert through_prefix >= 30  # the prefix was taken, not the whole text
