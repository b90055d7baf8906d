"""The labelattn Space: classify a text with any text classifier and see why it decided, by every method that fits.

Run it locally with `labelattn space [MODEL]` or `python -m labelattn.space.app`; a folder written by
`labelattn space --export DIR` runs it on a Hugging Face Space (its `app.py` calls `main`). The model is `MODEL`,
else the environment variable `LABELATTN_MODEL` (a Hub repo id or a local folder of any transformers sequence
classifier), else the default model that `labelattn train` saves. Tests and the CLI build the page with
`build_demo(model)` and serve it with `launch(demo, ...)`.

The page lays out components and wires events over the public `explainers` API: the library loads the model,
predicts, resolves targets, says which methods fit the model and what bounds their cost, checks an explanation
sent back against the model, compares methods, plots and summarises; this file bounds the inputs of a public
demo and shapes the results for Gradio.
"""

import dataclasses
import functools
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Before Gradio is imported: a hosted demo must not call home (version check, telemetry).
os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"

import gradio as gr
from fastapi import Request
from fastapi.responses import JSONResponse
from gradio.route_utils import FnIndexInferError
from huggingface_hub import constants as hub_constants
from huggingface_hub import snapshot_download
from matplotlib.figure import Figure

from explainers import (
    METHODS,
    Explanation,
    compare,
    explain,
    load_classifier,
    predict,
    supported_methods,
    token_limit,
)
from explainers.checks import check_explanation
from explainers.faithfulness import TextFaithfulness, evaluate_faithfulness
from explainers.options import Option, cost_option
from explainers.views import diagnostics, method_title, plot, question
from explainers.windows import check_long_text
from explainers.words import text_problem

from .export import MODEL_FILES

logger = logging.getLogger("labelattn.space")

MODEL_ENV = "LABELATTN_MODEL"
# "windows" reads a text longer than MAX_TOKENS whole, in overlapping windows (explainers.windows); by default the
# page reads its start and says so.
LONG_TEXT_ENV = "LABELATTN_LONG_TEXT"
# The longest input explained, in tokens (or fewer, if the model reads fewer); longer texts are cut, and the page
# says so.
MAX_TOKENS = 128
# Characters accepted per text box: a guard against megabyte posts through the API before tokenization.
MAX_CHARS = 2000
# The model runs one request at a time (see `Backend.lock`); a few more wait in the queue, the rest are refused.
CONCURRENCY = 2
QUEUE_SIZE = 64
# A model of hundreds or thousands of classes shows its most probable ones: in the prediction, and as the rows of
# the label-attention heatmap.
TOP_CLASSES = 10

PREDICTED = "predicted class"
NO_CONTRAST = "(no other class)"
PAIR_LABEL = "Second text (for pair classifiers: NLI, paraphrase)"

COMPARE_DEFAULT = ("label_attention", "integrated_gradients", "saliency", "input_x_gradient")

# A handful of questions of TREC, the default data set (6 coarse classes), written as the data set writes them.
EXAMPLES = [
    "How many Grammys did Michael Jackson win in 1983 ?",
    "Who was the first woman to fly across the Atlantic Ocean alone ?",
    "What sea is Bombay on ?",
    "Why did Egyptians shave their eyebrows ?",
    "What is BPH ?",
    "What was Mel Gibson 's first movie ?",
    "How do you get a broken cork out of a bottle ?",
    "What country was A Terrible Beauty to Leon Uris ?",
]

HOW_TO_GET_A_MODEL = """
### No model to show yet
Train the default model (TREC questions, a few minutes on a laptop CPU), then start the demo again:
```bash
labelattn train            # saves models/trec-embedding
labelattn space            # or: labelattn space path/or/hub-id
```
Or point the environment variable `LABELATTN_MODEL` at any text classifier: a local folder or a Hub repo id in the
cache (on a Hugging Face Space, set it as a variable of the Space).
"""


def find_model(model: str | None = None) -> str | None:
    """The model to serve: `model`, else `$LABELATTN_MODEL`, else the default trained model if it exists (looked
    for from the working directory and from the checkout holding this package, if it is one), else None."""
    model = model or os.environ.get(MODEL_ENV)
    if model:
        return model
    from labelattn import DEFAULT_MODEL_DIR

    # From the working directory as the relative path a user typed it (the page shows it), else from the checkout.
    for base in (Path(), Path(__file__).resolve().parents[2]):
        if (base / DEFAULT_MODEL_DIR / "config.json").is_file():
            return str(base / DEFAULT_MODEL_DIR)
    return None


def fetch_from_hub(name: str) -> None:
    """On a Space the served model is a Hub id: fetch its files into the Hugging Face cache once, so that
    `load_classifier`, which reads the cache only, finds it. Nothing is fetched for a local folder or offline
    (`HF_HUB_OFFLINE=1`, as in the tests); a failed fetch is logged and the loader then says what is missing."""
    if Path(name).expanduser().exists() or hub_constants.HF_HUB_OFFLINE:
        return
    try:
        snapshot_download(name, allow_patterns=MODEL_FILES)
    except Exception as error:  # no network, no such repo, no access: any of them leaves the cache as it was
        logger.warning("Could not fetch %s from the Hub (%s): reading the cache only.", name, error)


@dataclasses.dataclass(frozen=True)
class Cost:
    """The option that scales a method's cost (`Option.cost`), as the page's slider offers it.

    Attributes:
        method, option: the method and that option's declaration.
        fixed: the method's other capped options, fixed at their cap for interactive use (e.g. Integrated
            Gradients' `max_steps`).
    """

    method: str
    option: Option
    fixed: dict[str, Any]

    @property
    def parameter(self) -> str:
        """The slider's API parameter name, `<method>_<option>`."""
        return f"{self.method}_{self.option.name}"

    @property
    def bound(self) -> int:
        """The most the server accepts: the option's cap (its default when it declares none)."""
        return int(self.option.cap if self.option.cap is not None else self.option.default)

    @property
    def start(self) -> int:
        """Where the slider starts: the option's default, capped."""
        return min(int(self.option.default), self.bound)

    @classmethod
    def of(cls, method: str) -> "Cost | None":
        """The cost of `method` from its declared options; None for a method whose cost no option scales."""
        declared = METHODS[method].all_options()
        option = cost_option(declared)
        if option is None:
            return None
        fixed = {o.name: o.cap for o in declared if o.cap is not None and o is not option}
        return cls(method, option, fixed)

    def options(self, value: float | None) -> dict[str, Any]:
        """The options of one request: the slider's `value` (None: where it starts), checked against the bound."""
        value = self.start if value is None else value
        whole = isinstance(value, int | float) and not isinstance(value, bool) and int(value) == value
        if not whole or not 1 <= value <= self.bound:
            raise ValueError(f"{self.parameter} must be a whole number from 1 to {self.bound}, got {value!r:.40}.")
        return {self.option.name: int(value), **self.fixed}


class Backend:
    """The model, its tokenizer and the methods that fit it, behind one lock.

    Gradient methods hook the model's embedding layer while they run (Captum), and a hook would alter any forward
    pass run meanwhile by another request; a fast tokenizer changing its truncation setting in two threads at once
    fails ("Already borrowed"): every use of the model or the tokenizer takes `lock`.
    """

    def __init__(self, model_path: str, max_tokens: int = MAX_TOKENS, long_text: str | None = None):
        self.model_path = model_path
        self.long_text = check_long_text(long_text or os.environ.get(LONG_TEXT_ENV, "truncate"), [])
        fetch_from_hub(model_path)
        self.model, self.tokenizer = load_classifier(model_path)
        self.max_tokens = min(max_tokens, token_limit(self.model, self.tokenizer))
        config = self.model.config
        self.labels = [config.id2label[i] for i in range(config.num_labels)]
        self.lock = threading.Lock()
        supported = supported_methods(self.model, self.tokenizer)
        # The methods this model can use, in the registry's order (`Explainer.order`), and why the others cannot.
        self.methods = [m for m in METHODS if supported[m] is None]
        self.unsupported = {m: supported[m] for m in METHODS if supported[m] is not None}
        self.costs = {m: cost for m in self.methods if (cost := Cost.of(m)) is not None}

    def describe(self) -> str:
        config, shown = self.model.config, self.labels[:TOP_CLASSES]
        more = f", … ({len(self.labels) - len(shown)} more)" if len(self.labels) > len(shown) else ""
        return (
            f"**Model** `{self.model_path}` · {type(self.model).__name__} (`{config.model_type}`) · "
            f"{len(self.labels)} classes: {', '.join(shown)}{more}"
        )

    def reading(self, text: str | tuple[str, str]) -> dict[str, Any]:
        """How a text is read: at most `max_tokens` a window, a long single text in windows if the page says so."""
        return {"max_length": self.max_tokens, "long_text": self.long_text if isinstance(text, str) else "truncate"}

    def predict(self, text: str | tuple[str, str]) -> dict[str, float]:
        """Class probabilities of `text` (a text or a pair, read as `reading` says), label → probability."""
        with self.lock:
            predictions = predict(self.model, self.tokenizer, [text], **self.reading(text))
        return dict(zip(predictions.labels, predictions.probabilities[0].tolist(), strict=True))

    def check_method(self, method: Any) -> None:
        """Refuse a method this model cannot use, saying why (or which it can use)."""
        if method not in self.methods:
            reason = self.unsupported.get(method, f"choose one of {self.methods}")
            raise ValueError(f"The method {method!r:.60} is not available for this model: {reason}")

    def explain(self, text: str | tuple[str, str], method: str, target: Any = None, **options) -> Any:
        """`explainers.explain` of one text or pair (cut to `max_tokens`), for a method that fits the model."""
        self.check_method(method)
        with self.lock:
            return explain(
                self.model, self.tokenizer, text, method=method, target=target, **self.reading(text), **options
            )

    def compare(
        self, text: str | tuple[str, str], methods: list[str], target: Any, sliders: dict[str, float | None]
    ) -> dict[str, Explanation]:
        """`explainers.compare` of one text or pair by several methods (each once), each bounded by its slider."""
        for method in methods:
            self.check_method(method)
        methods = list(dict.fromkeys(methods))
        options = {method: self.cost_options(method, sliders) for method in methods}
        with self.lock:
            return compare(self.model, self.tokenizer, text, methods, target, options=options, **self.reading(text))

    def check_explanation(self, explanation: Any) -> Explanation:
        """A client's explanation dict as an `Explanation`: its texts bounded like any other, every field checked
        (`Explanation.from_dict`), and checked to be one of this model's (`explainers.checks.check_explanation`:
        its classes under their labels, its method, its words)."""
        if not isinstance(explanation, dict) or not explanation:
            raise ValueError("No explanation yet: run Explain first, and pass the dict it returns unchanged.")
        checked_text(explanation.get("text"))
        if explanation.get("text_pair") is not None:
            checked_text(explanation["text_pair"], "second text")
        exp = Explanation.from_dict(explanation)
        with self.lock:
            check_explanation(exp, self.model, self.tokenizer, max_length=self.max_tokens)
        return exp

    def cost_options(self, method: str, sliders: dict[str, float | None]) -> dict[str, Any]:
        """The options bounding the cost of `method`, from the sliders' values (API parameter → value)."""
        cost = self.costs.get(method)
        return {} if cost is None else cost.options(sliders.get(cost.parameter))


def user_errors(fn: Callable) -> Callable:
    """Show every failure as a `gr.Error` toast (the client gets the same message), never a stack trace: the
    library's errors (`ValueError`, `TypeError`) say what to change and are not logged; anything else is logged on
    the server with its traceback and the client told only its type."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except (ValueError, TypeError) as error:
            raise gr.Error(str(error), print_exception=False) from None
        except Exception as error:
            logger.exception("request failed")
            raise gr.Error(
                f"The model failed on this input ({type(error).__name__}); the server log has details.",
                print_exception=False,
            ) from None

    return wrapper


def checked_text(text: Any, name: str = "text", max_chars: int = MAX_CHARS) -> str:
    """`text` from a text box or an API client: a text (`explainers.words.text_problem`; an empty box sends None
    or "") of at most `max_chars` characters."""
    problem = text_problem("" if text is None else text)
    if problem is not None:
        error = ValueError if isinstance(text, str | None) else TypeError
        raise error(f"The {name} {problem}: type a sentence or pick one of the examples.")
    if len(text) > max_chars:
        raise ValueError(f"The {name} has {len(text)} characters; this demo takes at most {max_chars}.")
    return text


def model_input(text: Any, text_pair: Any = None) -> str | tuple[str, str]:
    """The text, or the pair (text, second text) when the second box holds anything."""
    text = checked_text(text)
    if text_pair is None or (isinstance(text_pair, str) and not text_pair.strip()):
        return text
    return (text, checked_text(text_pair, "second text"))


def target_of(target: str | None, contrast: str | None, predicted: Callable[[], str]) -> Any:
    """The `target=` of `explain` from the two selectors: None (the library takes the predicted class), a label,
    or a pair (a, b) for "a rather than b", where a is `predicted()` when no class was chosen."""
    target = None if target in (None, "", PREDICTED) else target
    if contrast in (None, "", NO_CONTRAST):
        return target
    return (predicted() if target is None else target, contrast)


def details_markdown(exp: Explanation, backend: Backend) -> str:
    """What the colours explain, the options, the checks the explanation carries, and whether the text was cut."""
    lines = [
        f"**{question(exp)}** · {method_title(exp.method)} · p({exp.target_label}) = "
        f"{exp.probability:.3f}. Words towards +1 pushed towards this class, words towards −1 against it (scores "
        "scaled to the largest)."
    ]
    if exp.options:
        lines.append("Options: " + ", ".join(f"`{k}={v}`" for k, v in exp.options.items()) + ".")
    lines += diagnostics(exp)
    if exp.truncated:
        lines.append(truncation_warning(backend))
    return "\n\n".join(lines)


def truncation_warning(backend: Backend) -> str:
    return (
        f"⚠️ **The text was cut**: this demo reads at most {backend.max_tokens} tokens, so only the words shown "
        "were classified and explained."
    )


def faithfulness_markdown(result: TextFaithfulness, label: str) -> str:
    tau = "undefined (one word)" if result.tau_loo is None else f"{result.tau_loo:.3f}"
    return (
        f"**Faithfulness** of this explanation for {label} (p = {result.probability:.3f}), averaged over the top "
        "10 %, 20 %, … 100 % of the words:\n\n"
        f"- comprehensiveness = {result.comprehensiveness:.3f}: the drop of p when the top words are removed "
        "(higher is better);\n"
        f"- sufficiency = {result.sufficiency:.3f}: the drop of p when only the top words are kept (lower is better);\n"
        f"- τ-LOO = {tau}: rank agreement of the scores with the drop of p when each word alone is removed."
    )


class Endpoints:
    """What each event and API endpoint does: check the inputs, call the backend, shape the outputs. Each is
    wrapped by `user_errors`, so a client gets a message, never a stack trace."""

    def __init__(self, backend: Backend):
        self.backend = backend

    @user_errors
    def predict(self, text: str, text_pair: str | None = None) -> dict[str, float]:
        """Class probabilities of the text (or the pair)."""
        return self.backend.predict(model_input(text, text_pair))

    @user_errors
    def explain(
        self, text: str, text_pair: str | None, method: str, target: str, contrast: str, **costs: float | None
    ) -> tuple[dict[str, float], list, str, dict]:
        """Prediction, word scores (HighlightedText), a summary, and the explanation as a dict."""
        backend, given = self.backend, model_input(text, text_pair)
        probabilities = backend.predict(given)  # the page shows them; they also name the predicted class
        wanted = target_of(target, contrast, lambda: max(probabilities, key=probabilities.get))
        exp = backend.explain(given, method, wanted, **backend.cost_options(method, costs))
        return probabilities, exp.segments(), details_markdown(exp, backend), exp.to_dict()

    @user_errors
    def heatmap(self, text: str, text_pair: str | None = None) -> Figure:
        """Label attention's signed terms (each word's exact share of each class's centered logit) for the most
        probable classes (a Figure of its own: pyplot's global state is not safe across the server's threads); the
        weights alone are the method `label_attention_weights` of the method list."""
        top_k = min(len(self.backend.labels), TOP_CLASSES)
        return plot(self.backend.explain(model_input(text, text_pair), "label_attention", top_k=top_k))

    @user_errors
    def faithfulness(self, explanation: dict | None) -> str:
        """Comprehensiveness, sufficiency and τ-LOO of an explanation (the dict that /explain returns)."""
        backend = self.backend
        if isinstance(explanation, dict) and "windows" in (explanation.get("extras") or {}):
            return "**Faithfulness** is measured on texts the model reads in one window; this one was read in several."
        exp = backend.check_explanation(explanation)
        with backend.lock:
            report = evaluate_faithfulness(backend.model, backend.tokenizer, [exp], max_length=backend.max_tokens)
        # The label shown is the model's, never the client's (checked equal, but Markdown shows what we hold).
        return faithfulness_markdown(report.per_text[0], backend.labels[exp.target])

    @user_errors
    def compare(
        self, text: str, text_pair: str | None, target: str, contrast: str, selected: list[str], **costs: float | None
    ) -> list:
        """A note on what is explained, then one HighlightedText value per method of the page (None for the
        methods not selected, whose panels are hidden)."""
        backend, given = self.backend, model_input(text, text_pair)
        if not isinstance(selected, list) or not selected:
            raise ValueError("Pick at least one method to compare (a list of method names).")
        wanted = target_of(target, contrast, lambda: self.predicted_label(given))
        explained = backend.compare(given, selected, wanted, costs)
        # A method that cannot explain "a rather than b" explained "a" alone (`explainers.target_for`): say so.
        pair = isinstance(wanted, tuple)
        alone = [method_title(m) for m, exp in explained.items() if pair and exp.contrast is None]
        asked = f"Why {wanted[0]} rather than {wanted[1]}?" if isinstance(wanted, tuple) else "Why this class?"
        note = f"**{asked}**" + (f" ({', '.join(alone)}: why {wanted[0]} alone.)" if alone else "")
        if any(exp.truncated for exp in explained.values()):
            note += "\n\n" + truncation_warning(backend)
        return [note, *(explained[m].segments() if m in explained else None for m in backend.methods)]

    def predicted_label(self, given: str | tuple[str, str]) -> str:
        probabilities = self.backend.predict(given)
        return max(probabilities, key=probabilities.get)


@dataclasses.dataclass
class ExplainTab:
    text: gr.Textbox
    text_pair: gr.Textbox
    method: gr.Dropdown
    target: gr.Dropdown
    contrast: gr.Dropdown
    sliders: dict[str, gr.Slider]
    button: gr.Button
    prediction: gr.Label
    highlight: gr.HighlightedText
    details: gr.Markdown
    heatmap: gr.Plot
    faithfulness: gr.Markdown
    raw: gr.JSON


@dataclasses.dataclass
class CompareTab:
    note: gr.Markdown
    chosen: gr.CheckboxGroup
    button: gr.Button
    panels: list[gr.HighlightedText]


def method_choices(backend: Backend) -> list[tuple[str, str]]:
    return [(method_title(m), m) for m in backend.methods]


def input_boxes() -> tuple[gr.Textbox, gr.Textbox]:
    text = gr.Textbox(
        label="Text",
        lines=2,
        placeholder="Ask a question, e.g. Who wrote Hamlet ?",
        max_length=MAX_CHARS,
        elem_id="text",
    )
    # An initial value makes the second text optional for API clients: `client.predict(text=..., api_name=...)`.
    text_pair = gr.Textbox(
        value="",
        label=PAIR_LABEL,
        lines=1,
        placeholder="Leave empty for a single text",
        max_length=MAX_CHARS,
        elem_id="text-pair",
    )
    gr.Examples(EXAMPLES, inputs=[text], label="Questions from TREC (the default data set)")
    return text, text_pair


def cost_sliders(backend: Backend) -> dict[str, gr.Slider]:
    """One slider per method whose cost an option scales, keyed by its API parameter."""
    with gr.Accordion("Cost of the slow methods", open=False, visible=bool(backend.costs)):
        return {
            cost.parameter: gr.Slider(
                1,
                cost.bound,
                value=cost.start,
                step=1,
                label=f"{method_title(cost.method)}: {cost.option.name}",
                info=cost.option.help,
                elem_id=cost.parameter,
            )
            for cost in backend.costs.values()
        }


def explain_tab(backend: Backend) -> ExplainTab:
    """The Explain tab's components (inside the Blocks context)."""
    first = backend.methods[0]
    with gr.Tab("Explain"):
        with gr.Row():
            with gr.Column(scale=3):
                text, text_pair = input_boxes()
                with gr.Row():
                    # Values outside the lists reach the endpoint, which says why it refuses them (a method this
                    # model cannot use, an unknown class) instead of Gradio's bare "not in the list of choices".
                    method = gr.Dropdown(
                        method_choices(backend), value=first, label="Method", allow_custom_value=True, elem_id="method"
                    )
                    target = gr.Dropdown(
                        [PREDICTED, *backend.labels],
                        value=PREDICTED,
                        label="Why this class?",
                        allow_custom_value=True,
                        elem_id="target",
                    )
                    contrast = gr.Dropdown(
                        [NO_CONTRAST, *backend.labels],
                        value=NO_CONTRAST,
                        label="…rather than this one?",
                        info="gradient methods and SHAP",
                        interactive=METHODS[first].allows_contrast,
                        allow_custom_value=True,
                        elem_id="contrast",
                    )
                sliders = cost_sliders(backend)
                button = gr.Button("Explain", variant="primary", elem_id="explain")
            with gr.Column(scale=2):
                prediction = gr.Label(label="Prediction", num_top_classes=TOP_CLASSES, elem_id="prediction")
        highlight = gr.HighlightedText(label="Words coloured by score", show_legend=True, elem_id="highlight")
        details = gr.Markdown(label="Summary", elem_id="details")
        with gr.Row():
            heatmap = gr.Plot(
                label="Label attention: classes × words",
                show_label=False,
                visible="label_attention" in backend.methods,
                elem_id="heatmap",
            )
            faithfulness = gr.Markdown(label="Faithfulness", elem_id="faithfulness")
        with gr.Accordion("The explanation as JSON", open=False):
            raw = gr.JSON(label="Explanation", elem_id="raw")
    return ExplainTab(
        text,
        text_pair,
        method,
        target,
        contrast,
        sliders,
        button,
        prediction,
        highlight,
        details,
        heatmap,
        faithfulness,
        raw,
    )


def compare_tab(backend: Backend) -> CompareTab:
    """The Compare tab's components: the methods this model supports, side by side."""
    methods = method_choices(backend)
    with gr.Tab("Compare methods"):
        gr.Markdown("The text and target of the Explain tab, explained by several methods side by side.")
        if backend.unsupported:
            gr.Markdown(
                "Not available for this model: "
                + "; ".join(f"{method_title(m)} ({why})" for m, why in backend.unsupported.items()),
                elem_id="unsupported",
            )
        note = gr.Markdown(elem_id="compare-note")
        chosen = gr.CheckboxGroup(
            methods,
            value=[m for m in COMPARE_DEFAULT if m in backend.methods] or backend.methods[:2],
            label="Methods",
            elem_id="compare-methods",
        )
        button = gr.Button("Compare", variant="primary", elem_id="compare")
        with gr.Row(equal_height=False):
            panels = [
                gr.HighlightedText(label=label, visible=name in chosen.value, min_width=320, elem_id=f"compare-{name}")
                for label, name in methods
            ]
    return CompareTab(note, chosen, button, panels)


def contrast_for(method: str) -> dict:
    """A method that cannot take "rather than" greys out the box and clears it: a disabled box keeps no class."""
    if method in METHODS and METHODS[method].allows_contrast:
        return gr.update(interactive=True)
    return gr.update(interactive=False, value=NO_CONTRAST)


def wire_events(backend: Backend, tab: ExplainTab, compare: CompareTab) -> None:
    """The events of the page and its named API endpoints: /explain, /heatmap, /faithfulness, /compare, /predict."""
    endpoints = Endpoints(backend)
    tab.method.change(contrast_for, tab.method, tab.contrast, api_visibility="private")
    # `preprocess=False`: the endpoints get what a client sent, unconverted, and check it themselves, so that a
    # wrong value is named ("integrated_gradients_n_steps must be a whole number ...", "The text is an int") rather
    # than failing inside a component's conversion with Gradio's generic "the upstream app raised an exception".
    explained = gr.on(
        [tab.button.click, tab.text.submit],
        endpoints.explain,
        inputs=[tab.text, tab.text_pair, tab.method, tab.target, tab.contrast],
        inputs_kwargs=tab.sliders,
        outputs=[tab.prediction, tab.highlight, tab.details, tab.raw],
        api_name="explain",
        preprocess=False,
    )
    if "label_attention" in backend.methods:
        explained.success(
            endpoints.heatmap,
            inputs=[tab.text, tab.text_pair],
            outputs=[tab.heatmap],
            api_name="heatmap",
            preprocess=False,
        )
    explained.success(endpoints.faithfulness, inputs=[tab.raw], outputs=[tab.faithfulness], api_name="faithfulness")
    compare.chosen.change(
        lambda selected: [gr.update(visible=m in selected) for m in backend.methods],
        compare.chosen,
        compare.panels,
        api_visibility="private",
    )
    compare.button.click(
        endpoints.compare,
        inputs=[tab.text, tab.text_pair, tab.target, tab.contrast, compare.chosen],
        inputs_kwargs=tab.sliders,
        outputs=[compare.note, *compare.panels],
        api_name="compare",
        preprocess=False,
    )
    # API only: the probabilities alone, the cheapest call.
    gr.api(endpoints.predict, api_name="predict")


def load_backend(model: str | Backend | None) -> tuple[Backend | None, str]:
    """The backend of `model` (a loaded `Backend`, or a name for `find_model`), or None and what the page says."""
    if isinstance(model, Backend):
        return model, ""
    path = find_model(model)
    if path is None:
        return None, HOW_TO_GET_A_MODEL
    try:
        return Backend(path), ""
    except (OSError, ValueError) as error:
        return None, f"### Could not load the model `{path}`\n{error}\n\n{HOW_TO_GET_A_MODEL}"


def build_demo(model: str | Backend | None = None) -> gr.Blocks:
    """The page for `model` (a loaded `Backend`, or a name for `find_model`), queued; a page that says how to get a
    model when there is none or it does not load."""
    backend, problem = load_backend(model)
    with gr.Blocks(title="labelattn: why did the model decide?", analytics_enabled=False) as demo:
        gr.Markdown(
            "# labelattn: why did the model decide?\nAny text classifier, explained word by word. Type a text (or a "
            "pair), pick a method, and see which words pushed the prediction."
        )
        if backend is None:
            gr.Markdown(problem, elem_id="no-model")
        else:
            gr.Markdown(backend.describe(), elem_id="model-info")
            wire_events(backend, explain_tab(backend), compare_tab(backend))
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE)
    return demo


async def unknown_endpoint(request: Request, error: FnIndexInferError) -> JSONResponse:
    """A call to an API name the page does not have: a 404 that names the endpoints, not a 500 and a traceback."""
    return JSONResponse(
        {"error": f"{error}. The endpoints are /predict, /explain, /heatmap, /faithfulness and /compare."},
        status_code=404,
    )


def launch(demo: gr.Blocks, **kwargs) -> Any:
    """`demo.launch(**kwargs)`, without server-side rendering and with the app's handler of unknown API names."""
    app_kwargs = {"exception_handlers": {FnIndexInferError: unknown_endpoint}}
    return demo.launch(ssr_mode=False, app_kwargs=app_kwargs, **kwargs)


def main() -> None:
    """Serve the page of `find_model()` on `$GRADIO_SERVER_NAME` (a Space's Dockerfile sets 0.0.0.0) or loopback,
    at `$GRADIO_SERVER_PORT` (default 7860)."""
    logging.basicConfig(level=logging.INFO)
    launch(build_demo(), server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))


if __name__ == "__main__":
    main()
