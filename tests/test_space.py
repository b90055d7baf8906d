"""The Gradio Space as its users meet it: through `gradio_client` on loopback, the page without a model, the
`labelattn space` command and the Space folder it exports. The browser test is in test_space_browser.py; the
exported folder installed in a fresh environment, in test_packaging.py."""

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path

import gradio as gr
import httpx
import pytest
import torch
from conftest import PLANTED_WORD, make_model, planted_texts, save_model, tiny_encoder_config
from gradio_client import Client
from gradio_client.exceptions import AppError
from huggingface_hub import SpaceCard
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from transformers import BertForSequenceClassification

from explainers import LoadError, supported_methods
from explainers.views import method_title
from labelattn import cli, space
from labelattn.space import app, export

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_app(model: str | None):
    """The Space's page for `model`, served on a free loopback port; yields its URL."""
    demo = app.build_demo(model)
    port = free_port()
    app.launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@pytest.fixture(scope="module")
def planted_dir(planted_embedding_model, tokenizer, tmp_path_factory) -> str:
    """The planted-word model ("zebra" alone means class "planted"), saved as a user's trained model is."""
    return str(save_model(planted_embedding_model, tokenizer, tmp_path_factory.mktemp("planted")))


@pytest.fixture(scope="module")
def client(planted_dir):
    with running_app(planted_dir) as url:
        yield Client(url, verbose=False)


def explain(client: Client, text: str, method: str = "label_attention", target: str = app.PREDICTED, **kwargs):
    """/explain as a client calls it; `text_pair`, `contrast` and the cost sliders by keyword."""
    contrast = kwargs.pop("contrast", app.NO_CONTRAST)
    text_pair = kwargs.pop("text_pair", "")
    return client.predict(text, text_pair, method, target, contrast, api_name="/explain", **kwargs)


@pytest.fixture(scope="module")
def bert_dir(tokenizer, tmp_path_factory) -> str:
    """A plain transformers `BertForSequenceClassification` (no label attention) of 30 classes, with the MiniLM
    tokenizer, saved as any fine-tuned classifier is."""
    torch.manual_seed(0)
    labels = {i: f"topic_{i}" for i in range(30)}
    config = tiny_encoder_config(id2label=labels, label2id={v: k for k, v in labels.items()})
    return str(save_model(BertForSequenceClassification(config).eval(), tokenizer, tmp_path_factory.mktemp("bert")))


def words_of(highlighted: list[dict]) -> dict[str, float]:
    return {piece["token"]: piece["class_or_confidence"] for piece in highlighted if piece["class_or_confidence"]}


def test_explain_shows_prediction_and_word_scores(client):
    text = f"what {PLANTED_WORD} was in the water"
    prediction, highlighted, details, raw = explain(client, text)
    assert prediction["label"] == "planted"
    assert {c["label"] for c in prediction["confidences"]} == {"other", "planted"}
    assert max(c["confidence"] for c in prediction["confidences"]) > 0.9
    assert "".join(piece["token"] for piece in highlighted) == text
    scores = words_of(highlighted)
    assert max(scores, key=scores.get) == PLANTED_WORD and scores[PLANTED_WORD] == 1.0
    assert raw["target_label"] == "planted" and raw["method"] == "label_attention"
    assert "planted" in details and "cut" not in details


def test_target_selector_explains_another_class(client):
    text = f"one {PLANTED_WORD} in the water"
    _, _, details, raw = explain(client, text, target="other")
    assert raw["target_label"] == "other" and raw["contrast_label"] is None
    assert raw["probability"] < 0.1  # the model's probability of the class asked for, not of its prediction
    assert "**Why other?**" in details


def test_contrast_with_integrated_gradients_and_its_delta(client):
    text = f"the {PLANTED_WORD} can find water"
    _, highlighted, details, raw = explain(
        client, text, "integrated_gradients", contrast="other", integrated_gradients_n_steps=32
    )
    assert (raw["target_label"], raw["contrast_label"]) == ("planted", "other")
    assert raw["options"]["n_steps"] <= 64, "the page caps IG's refinements"
    gap = raw["score"] - raw["baseline_score"]
    assert abs(sum(raw["scores"]) - gap) <= abs(raw["delta"]) + 1e-3 * abs(gap)
    assert gap > 0  # the planted word raises planted over other
    assert max(words_of(highlighted), key=words_of(highlighted).get) == PLANTED_WORD
    assert "**Why planted rather than other?**" in details and "integration error" in details


def test_shap_reports_its_standard_error_within_the_pages_sample_budget(client):
    _, highlighted, details, raw = explain(client, f"the {PLANTED_WORD} can find water", "shap", shap_max_samples=8)
    assert raw["options"]["max_samples"] == 8 and len(raw["extras"]["standard_errors"]) == len(raw["words"])
    assert "mean standard error" in details
    assert max(words_of(highlighted), key=words_of(highlighted).get) == PLANTED_WORD


@pytest.mark.filterwarnings("ignore:Text 0 is longer than")
def test_long_text_is_cut_with_a_visible_message(client):
    text = " ".join(["water"] * 300) + f" {PLANTED_WORD}"
    _, highlighted, details, raw = explain(client, text)
    assert raw["truncated"] and len(raw["words"]) < 300
    assert "The text was cut" in details and f"at most {app.MAX_TOKENS} tokens" in details
    assert PLANTED_WORD not in words_of(highlighted)


def test_faithfulness_of_the_shown_explanation(client):
    _, _, _, raw = explain(client, f"how many {PLANTED_WORD} were there")
    shown = client.predict(raw, api_name="/faithfulness")
    comprehensiveness = float(re.search(r"comprehensiveness = (-?[\d.]+)", shown).group(1))
    sufficiency = float(re.search(r"sufficiency = (-?[\d.]+)", shown).group(1))
    # Label attention puts the planted word first: removing it loses the class, keeping it keeps the class.
    assert comprehensiveness > 0.3 and comprehensiveness > sufficiency + 0.3


def test_heatmap_and_predict_endpoints(client):
    heatmap = client.predict(f"a {PLANTED_WORD} here", api_name="/heatmap")
    assert heatmap["type"] == "matplotlib" and heatmap["plot"].startswith("data:image/")
    probabilities = client.predict(f"a {PLANTED_WORD} here", api_name="/predict")
    assert set(probabilities) == {"other", "planted"} and probabilities["planted"] > 0.9
    assert abs(sum(probabilities.values()) - 1) < 1e-5


def test_every_endpoint_takes_a_single_text_by_keyword(client):
    """The second text is optional everywhere: a client names only what it needs (issue 19.6)."""
    text = f"a {PLANTED_WORD} here"
    assert client.predict(text=text, api_name="/predict")["planted"] > 0.9
    prediction, _, _, raw = client.predict(text=text, method="saliency", api_name="/explain")
    assert prediction["label"] == "planted" and raw["text_pair"] is None and raw["method"] == "saliency"
    note, *panels = client.predict(text=text, selected=["saliency"], api_name="/compare")
    assert "Why this class?" in note and sum(panel is not None for panel in panels) == 1
    assert client.predict(text=text, api_name="/heatmap")["type"] == "matplotlib"
    parameters = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    for endpoint in ("/predict", "/explain", "/compare", "/heatmap"):
        pair = next(p for p in parameters[endpoint]["parameters"] if p["parameter_name"] == "text_pair")
        assert pair["parameter_has_default"], endpoint


def test_compare_shows_the_chosen_methods_side_by_side(client):
    text = f"the {PLANTED_WORD} said no"
    chosen = ["label_attention_weights", "integrated_gradients"]
    note, *panels = client.predict(text, "", "planted", "other", chosen, api_name="/compare")
    shown = [panel for panel in panels if panel is not None]  # one value per method of the page, None if not chosen
    assert len(shown) == 2 and len(panels) > 2
    for panel in shown:
        assert "".join(piece["token"] for piece in panel) == text
        assert max(words_of(panel), key=words_of(panel).get) == PLANTED_WORD
    # Label-attention weights cannot explain "planted rather than other": the note says they show "planted" alone.
    alone = f"{method_title('label_attention_weights')}: why planted alone"
    assert "Why planted rather than other?" in note and alone in note
    assert "The text was cut" not in note


@pytest.mark.filterwarnings("ignore:Text 0 is longer than")
def test_compare_says_when_the_text_was_cut(client):
    text = " ".join(["water"] * 300) + f" {PLANTED_WORD}"
    note = client.predict(text, "", app.PREDICTED, app.NO_CONTRAST, ["label_attention"], api_name="/compare")[0]
    assert "The text was cut" in note and f"at most {app.MAX_TOKENS} tokens" in note


def tampered(client: Client, **fields) -> dict:
    """A real explanation with some fields changed by the client."""
    return {**explain(client, f"a {PLANTED_WORD} here")[-1], **fields}


def huge_explanation(client: Client) -> dict:
    """A real explanation whose text a client has blown up to 400,000 characters."""
    raw = explain(client, f"a {PLANTED_WORD} here")[-1]
    return {**raw, "text": raw["text"] + " x" * 200_000}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: explain(c, "   "), "The text is empty or only whitespace"),
        (lambda c: explain(c, "x" * (app.MAX_CHARS + 1)), f"at most {app.MAX_CHARS}"),
        (
            lambda c: explain(c, "a zebra", "integrated_gradients", integrated_gradients_n_steps=10_000),
            "integrated_gradients_n_steps must be a whole number from 1 to 64, got 10000",
        ),
        (lambda c: explain(c, "a zebra", "integrated_gradients", integrated_gradients_n_steps=2.5), "n_steps"),
        # A value of the wrong type is named, not Gradio's generic "the upstream app raised an exception" (20.12).
        (
            lambda c: explain(c, "a zebra", "integrated_gradients", integrated_gradients_n_steps="abc"),
            "integrated_gradients_n_steps must be a whole number from 1 to 64, got 'abc'",
        ),
        (
            lambda c: c.predict(
                "a zebra", "", "planted", app.NO_CONTRAST, ["shap"], shap_max_samples=[3], api_name="/compare"
            ),
            "shap_max_samples must be a whole number from 1 to 64, got [3]",
        ),
        (lambda c: explain(c, 12345), "The text is an int, not a str"),
        # A list where one method name goes (issue 29.3): once "unhashable type: 'list'".
        (lambda c: explain(c, "a zebra", []), "The method is [], not a method name: give one name, one of"),
        (lambda c: explain(c, "a zebra", ["saliency"]), "The method is ['saliency'], not a method name"),
        (
            lambda c: c.predict("a zebra", "", "planted", app.NO_CONTRAST, "shap", api_name="/compare"),
            "a list of method",
        ),
        (
            lambda c: c.predict("a zebra", "", "planted", app.NO_CONTRAST, ["nope"], api_name="/compare"),
            "'nope' is not available",
        ),
        (lambda c: explain(c, "a zebra", text_pair="x" * (app.MAX_CHARS + 1)), "The second text has"),
        (lambda c: explain(c, "a zebra", "shap", shap_max_samples=65), "from 1 to 64, got 65"),
        # Targets are the library's to resolve: a class against itself, a class the model lacks, a method it lacks.
        (lambda c: explain(c, "a zebra", "saliency", target="other", contrast="other"), "names class 'other' twice"),
        (lambda c: explain(c, "a zebra", "saliency", target="HUM"), "Unknown target label 'HUM'"),
        (lambda c: explain(c, "a zebra", "attention_flow"), "not available for this model: the method follows"),
        (lambda c: explain(c, "a zebra", "label_attention_weights", contrast="other"), "cannot explain a pair target"),
        (lambda c: c.predict("", api_name="/predict"), "The text is empty"),
        # The endpoints take what a client sends, unconverted: a text that is not a string is said to be one.
        (lambda c: c.predict(12345, api_name="/predict"), "The text is an int, not a str"),
        (lambda c: c.predict({"text": "a zebra"}, api_name="/predict"), "The text is a dict, not a str"),
        (lambda c: c.predict(["a zebra"], api_name="/predict"), "The text is a list, not a str"),
        # /faithfulness takes a dict from the client: its text is bounded like any other, every field checked,
        # its classes checked against the model's (a label is shown in the page's Markdown, never echoed raw).
        (lambda c: c.predict(huge_explanation(c), api_name="/faithfulness"), f"at most {app.MAX_CHARS}"),
        (lambda c: c.predict({"text": "a zebra"}, api_name="/faithfulness"), "Explanation"),
        (lambda c: c.predict(tampered(c, text=12345), api_name="/faithfulness"), "The text is an int, not a str"),
        (lambda c: c.predict(tampered(c, spans="notalist"), api_name="/faithfulness"), "spans"),
        (lambda c: c.predict(tampered(c, target_label="**HACKED**"), api_name="/faithfulness"), "not a class of"),
        (lambda c: c.predict(tampered(c, target=7), api_name="/faithfulness"), "not a class of this model"),
        (lambda c: c.predict(tampered(c, method="nope"), api_name="/faithfulness"), "method 'nope' cannot explain"),
        # Words that are not the tokenizer's for the text: refused before any measure is made.
        (lambda c: c.predict(tampered(c, words=["a", "hippo", "here"]), api_name="/faithfulness"), "not at its span"),
        (
            lambda c: c.predict(
                tampered(c, text="a zebra there", words=["a", "zebra"], spans=[[0, 1], [2, 7]], scores=[0.0, 1.0]),
                api_name="/faithfulness",
            ),
            "not the words this tokenizer gives",
        ),
    ],
)
def test_bad_requests_get_the_apps_message(client, call, message):
    with pytest.raises(AppError, match=re.escape(message)):
        call(client)


def test_a_tampered_label_is_refused_not_echoed(client):
    with pytest.raises(AppError) as refused:
        client.predict(tampered(client, target_label="<img src=x onerror=alert(1)>"), api_name="/faithfulness")
    assert "onerror" not in str(refused.value)


def test_an_unknown_api_name_is_a_404_without_traceback(client, capfd):
    for path in ("gradio_api/call/nope", "gradio_api/run/nope"):
        answer = httpx.post(client.src + path, json={"data": ["a zebra"]}, timeout=60)
        assert answer.status_code == 404 and "/explain" in answer.json()["error"]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(("backbone", "pooling"), [("embedding", "mean"), ("encoder", "label_attention")])
def test_only_methods_that_fit_the_model_are_listed(tokenizer, tmp_path, backbone, pooling):
    backend = app.Backend(str(save_model(make_model(backbone, pooling, num_labels=2), tokenizer, tmp_path / "model")))
    text, supported = "one two three", supported_methods(backend.model)
    for name, reason in supported.items():
        if reason is not None:
            assert name not in backend.methods
            with pytest.raises(ValueError, match=re.escape(reason)):
                backend.explain(text, name)
        else:
            assert backend.explain(text, name, **backend.cost_options(name, {})).words == text.split()
    assert backend.methods and set(backend.methods) == {name for name, why in supported.items() if why is None}
    # The heatmap (and its endpoint) exists where label attention does; the compare tab lists the methods allowed.
    demo = app.build_demo(backend)
    api = demo.get_api_info()["named_endpoints"]
    assert "/explain" in api and ("/heatmap" in api) == (pooling == "label_attention")
    compare = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "compare-methods")
    assert [value for _, value in compare.choices] == backend.methods


def test_a_plain_bert_classifier_of_many_classes_is_served_and_explained(bert_dir):
    """Any text classifier: a transformers BertForSequenceClassification of 30 classes, through the client. The
    prediction shows the top classes, the page has no heatmap (no label attention), the methods are its own."""
    with running_app(bert_dir) as url:
        bert = Client(url, verbose=False)
        assert "/heatmap" not in bert.view_api(print_info=False, return_format="dict")["named_endpoints"]
        text = "Who wrote Hamlet ?"
        prediction, highlighted, details, raw = explain(bert, text, "integrated_gradients")
        shown = [c["confidence"] for c in prediction["confidences"]]
        assert len(shown) == app.TOP_CLASSES and shown == sorted(shown, reverse=True)
        assert raw["target_label"] == prediction["label"] and raw["method"] == "integrated_gradients"
        assert "".join(piece["token"] for piece in highlighted) == text
        gap = raw["score"] - raw["baseline_score"]
        assert abs(sum(raw["scores"]) - gap) <= abs(raw["delta"]) + 1e-3 * max(abs(gap), 1e-3)
        assert "integration error" in details
        with pytest.raises(AppError, match="label-attention"):
            explain(bert, text, "label_attention")
        probabilities = bert.predict(text, api_name="/predict")
        assert len(probabilities) == 30 and abs(sum(probabilities.values()) - 1) < 1e-5


def test_a_pair_is_explained_word_by_word_in_both_texts(bert_dir):
    """The second text box makes the input a pair: words of both texts, each with its segment and its span."""
    premise, hypothesis = "A man plays a guitar .", "Nobody makes music ."
    with running_app(bert_dir) as url:
        bert = Client(url, verbose=False)
        _, _, _, raw = bert.predict(text=premise, text_pair=hypothesis, method="saliency", api_name="/explain")
        assert raw["text"] == premise and raw["text_pair"] == hypothesis
        assert set(raw["word_segments"]) == {0, 1}
        for word, (start, end), segment in zip(raw["words"], raw["spans"], raw["word_segments"], strict=True):
            assert word == (premise, hypothesis)[segment][start:end]
        alone = bert.predict(text=premise, api_name="/predict")
        paired = bert.predict(text=premise, text_pair=hypothesis, api_name="/predict")
        assert alone != paired  # the second text reaches the model
        assert "comprehensiveness" in bert.predict(raw, api_name="/faithfulness")


def test_the_heatmap_of_many_classes_shows_the_most_probable(tokenizer, tmp_path):
    backend = app.Backend(str(save_model(make_model(num_labels=30), tokenizer, tmp_path / "model")))
    figure = app.Endpoints(backend).heatmap("one two three four")
    rows = [tick.get_text() for tick in figure.axes[0].get_yticklabels()]
    probabilities = backend.predict("one two three four")
    assert rows == sorted(probabilities, key=probabilities.get, reverse=True)[: app.TOP_CLASSES]


def test_without_a_model_the_page_says_how_to_train_one(monkeypatch, tmp_path):
    monkeypatch.delenv(app.MODEL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(app, "__file__", str(tmp_path / "space" / "app.py"))  # no default model beside it either
    assert app.find_model() is None
    page = str(app.build_demo().config)
    assert "labelattn train" in page and app.MODEL_ENV in page
    broken = str(app.build_demo(str(tmp_path)).config)  # a folder without a model
    assert "Could not load the model" in broken and "labelattn train" in broken


def test_a_space_fetches_a_hub_model_without_pickle_weights_and_nothing_offline(monkeypatch, planted_dir):
    fetched = []
    monkeypatch.setattr(app, "snapshot_download", lambda name, **kwargs: fetched.append((name, kwargs)))
    monkeypatch.setattr(app.hub_constants, "HF_HUB_OFFLINE", False)
    app.fetch_from_hub(planted_dir)  # a local folder
    app.fetch_from_hub("org/classifier")
    assert fetched == [("org/classifier", {"allow_patterns": export.MODEL_FILES})]
    assert not any(fnmatch(name, pattern) for name in ("pytorch_model.bin", "x.py") for pattern in export.MODEL_FILES)
    monkeypatch.setattr(app.hub_constants, "HF_HUB_OFFLINE", True)
    app.fetch_from_hub("org/other")
    assert len(fetched) == 1


def test_model_comes_from_the_environment_variable(monkeypatch, planted_dir):
    monkeypatch.setenv(app.MODEL_ENV, planted_dir)
    assert app.find_model() == planted_dir
    assert app.find_model("elsewhere") == "elsewhere"  # an explicit model wins


def test_nothing_outside_loopback_is_contacted(planted_dir, monkeypatch):
    """Build, launch, call: every host name looked up and every socket connection is loopback. (Offline, a call
    to an outside host fails at the name lookup, before any connection: both are recorded.)"""
    contacted, looked_up = [], []
    connect, getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def recording_connect(sock, address):
        contacted.append(address)
        return connect(sock, address)

    def recording_getaddrinfo(host, *args, **kwargs):
        looked_up.append(host.decode() if isinstance(host, bytes) else host)
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", recording_connect)
    monkeypatch.setattr(socket, "getaddrinfo", recording_getaddrinfo)
    with running_app(planted_dir) as url:
        assert Client(url, verbose=False).predict("a zebra", api_name="/predict")["planted"] > 0.9
    hosts = {address[0] for address in contacted if isinstance(address, tuple)}
    assert hosts and hosts <= {"127.0.0.1"}, hosts
    assert set(looked_up) <= {"127.0.0.1", "localhost", None}, looked_up


def space_command(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    space.add_arguments(parser)
    return space.run(parser.parse_args(argv))


def test_cli_serves_the_app_on_loopback(monkeypatch, planted_dir):
    launched = {}
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **kwargs: launched.update(kwargs))
    assert space_command(planted_dir, "--port", "7999") == 0
    assert {k: launched[k] for k in ("server_name", "server_port", "ssr_mode")} == {
        "server_name": "127.0.0.1",
        "server_port": 7999,
        "ssr_mode": False,
    }


def test_cli_refuses_a_model_that_does_not_load(tmp_path):
    # The loader's LoadError (a ValueError): the `labelattn` command prints it as a one-line error.
    with pytest.raises(LoadError, match="nowhere"):
        space_command(str(tmp_path / "nowhere"))
    with pytest.raises(LoadError, match="empty"):
        space_command(str((tmp_path / "empty").mkdir() or tmp_path / "empty"))
    with pytest.raises(ValueError, match="--port 0 is not a TCP port"):
        space_command("--port", "0")


@pytest.mark.slow
def test_twenty_concurrent_clients_each_get_their_own_answer(client):
    """Label attention and Integrated Gradients interleaved, 20 at once: each answer is the one of its own text
    (IG hooks the shared model while it runs; no answer may see another request's hook)."""
    texts, labels = planted_texts(20, seed=7)
    methods = ["label_attention", "integrated_gradients"] * 10

    def ask(i: int):
        return explain(Client(client.src, verbose=False), texts[i], methods[i])

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(ask, range(20)))
    for text, label, method, (prediction, highlighted, _, raw) in zip(texts, labels, methods, answers, strict=True):
        assert prediction["label"] == ["other", "planted"][label]
        assert raw["method"] == method and raw["text"] == text
        assert "".join(piece["token"] for piece in highlighted) == text
        if label:
            scores = words_of(highlighted)
            assert max(scores, key=scores.get) == PLANTED_WORD


@contextmanager
def app_process(python: str, folder, env: dict[str, str], log):
    """`python app.py` in `folder` with the environment `env` (plus a free port), as a Space starts it; yields a
    client once the page answers."""
    port = free_port()
    env = {**env, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    with open(log, "w") as out:
        server = subprocess.Popen([python, "app.py"], cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, Path(log).read_text()
            try:
                client = Client(f"http://127.0.0.1:{port}/", verbose=False)
                break
            except Exception:
                assert time.monotonic() < deadline, f"the app did not answer within 180 s:\n{Path(log).read_text()}"
                time.sleep(0.5)
        yield client
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture(scope="session")
def labelattn_wheel(tmp_path_factory) -> Path:
    """A wheel of this checkout, built as `labelattn space --export` builds it."""
    return export.build_wheel(export.checkout_root(), tmp_path_factory.mktemp("wheel"))


def test_the_exported_folder_is_a_docker_space_that_installs_its_own_wheel(labelattn_wheel, tmp_path):
    folder = export.export_space(tmp_path / "space", "you/trec-embedding", labelattn_wheel)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["Dockerfile", "README.md", "app.py", "requirements.txt", labelattn_wheel.name]
    )
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    card = SpaceCard.load(folder / "README.md")
    assert card.data.sdk == "docker" and card.data.app_port == export.PORT
    assert card.data.license == project["license"].lower() and card.data.models == ["you/trec-embedding"]
    assert card.data.title and card.data.emoji and len(card.data.short_description) <= 60
    # requirements.txt: CPU torch at the project's pin, the wheel of the folder, the Gradio the app is written for.
    lines = [line for line in (folder / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
    assert lines[0] == f"--extra-index-url {export.CPU_TORCH_INDEX}"
    pins = {Requirement(line).name: Requirement(line) for line in lines[1:] if not line.startswith("./")}
    torch_pin = next(Requirement(r) for r in project["dependencies"] if r.startswith("torch"))
    assert str(pins["torch"].specifier) == f"{torch_pin.specifier}+cpu"
    assert str(pins["gradio"].specifier) == f"=={gr.__version__}"
    assert f"./{labelattn_wheel.name}" in lines and set(pins) == {"torch", "gradio"}
    # The Dockerfile copies the wheel in before installing, serves on the card's port, runs app.py.
    docker = (folder / "Dockerfile").read_text()
    python = re.search(r"^FROM python:(\d+\.\d+)-slim$", docker, flags=re.M).group(1)
    assert SpecifierSet(project["requires-python"]).contains(f"{python}.0")
    copy = f"COPY --chown=user requirements.txt {labelattn_wheel.name} ./"
    assert docker.index(copy) < docker.index("RUN pip install")
    assert f"GRADIO_SERVER_PORT={export.PORT}" in docker and 'CMD ["python", "app.py"]' in docker
    source = (folder / "app.py").read_text()
    compile(source, "app.py", "exec")
    assert "os.environ.setdefault(MODEL_ENV, 'you/trec-embedding')" in source


def test_an_export_refuses_before_writing(labelattn_wheel, tmp_path, monkeypatch):
    taken = tmp_path / "taken"
    (taken / "x").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="not an empty folder"):
        export.export_space(taken, None, labelattn_wheel)
    with pytest.raises(export.ExportError, match="neither a model folder nor a Hub repo id"):
        export.export_space(tmp_path / "a", "not a/valid/id", labelattn_wheel)
    with pytest.raises(LoadError):
        export.export_space(tmp_path / "b", str(taken), labelattn_wheel)  # a folder that holds no model
    with pytest.raises(export.ExportError, match="not a labelattn wheel"):
        export.export_space(tmp_path / "c", None, tmp_path / "labelattn.tar.gz")
    # Installed from a wheel, there is no checkout to build one from: the message says to pass --wheel.
    monkeypatch.setattr(export, "__file__", str(tmp_path / "site-packages" / "labelattn" / "space" / "export.py"))
    with pytest.raises(FileNotFoundError, match="--wheel"):
        export.export_space(tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"], "nothing written, not even a staging folder"


def test_an_export_the_folder_or_wheel_of_which_cannot_be_used_is_one_line(tmp_path, capsys):
    """Issue 29.3: once a raw `zipfile.BadZipFile`, `[Errno 17] File exists` and a temporary path never typed."""
    not_a_zip = tmp_path / "labelattn-0.1.0-py3-none-any.whl"
    not_a_zip.write_text("not a zip archive")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    cases = {
        (str(tmp_path / "space"), str(not_a_zip)): f"--wheel {not_a_zip} is not a wheel (File is not a zip file): a "
        "wheel is a zip archive; build one with pip wheel --no-deps -w dist . and pass that file.",
        (str(a_file / "sub"), str(not_a_zip)): f"--export {a_file / 'sub'}: {a_file} is a file, not a folder, so "
        f"{a_file / 'sub'} cannot be made: export the Space into a new folder elsewhere.",
        ("/proc/x", str(not_a_zip)): "--export /proc/x: nothing can be written in /proc (",
    }
    for (folder, wheel), message in cases.items():
        assert cli.main(["space", "--export", folder, "--wheel", wheel]) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"labelattn space: error: {message}") and error.count("\n") == 1, error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", not_a_zip.name], "nothing written"


@pytest.mark.slow
def test_an_exported_space_with_its_model_runs_with_python_app_py(labelattn_wheel, planted_dir, tmp_path):
    """`labelattn space --export DIR --model FOLDER` copies the model in (its safetensors, config and tokenizer,
    nothing else), and `python app.py` there serves it with no LABELATTN_MODEL set. (Here this checkout's package
    runs the app; test_packaging.py installs the folder's own requirements in a fresh environment.)"""
    folder = tmp_path / "space"
    assert space_command("--export", str(folder), "--model", planted_dir, "--wheel", str(labelattn_wheel)) == 0
    copied = {p.name for p in (folder / export.BUNDLED_MODEL).iterdir()}
    assert "model.safetensors" in copied and "config.json" in copied and "tokenizer.json" in copied
    assert all(any(fnmatch(name, pattern) for pattern in export.MODEL_FILES) for name in copied)
    assert f"the folder `{export.BUNDLED_MODEL}/`" in (folder / "README.md").read_text()
    env = {k: v for k, v in os.environ.items() if k != app.MODEL_ENV}
    with app_process(sys.executable, folder, env, tmp_path / "server.log") as client:
        assert client.predict(text=f"a {PLANTED_WORD} here", api_name="/predict")["planted"] > 0.9


def test_long_texts_are_read_in_windows_when_the_page_says_so(planted_dir, monkeypatch):
    """`LABELATTN_LONG_TEXT=windows`: a text longer than the page reads is explained whole, every word once."""
    monkeypatch.setenv(app.LONG_TEXT_ENV, "windows")
    backend = app.Backend(planted_dir, max_tokens=16)
    long = " ".join(["the", "old", "zebra", "was", "there"] * 8)
    exp = backend.explain(long, "saliency")
    assert exp.words == long.split() and not exp.truncated and len(exp.extras["windows"]) > 1
    assert app.Backend(planted_dir, max_tokens=16, long_text="truncate").explain(long, "saliency").truncated
