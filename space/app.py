"""The labelattn Space: classify a text with a labelattn model and see why it decided, by every method that fits.

Run it locally with `labelattn space [MODEL]`, or `python app.py` here (and on a Hugging Face Space, unchanged).
The model is `MODEL`, else the environment variable `LABELATTN_MODEL` (a Hub repo id or a local folder), else the
default model that `labelattn train` saves. Tests and the CLI build the page with `build_demo(model)`.
"""

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
import torch
from matplotlib.figure import Figure
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from explainers import METHODS, Explainer, Explanation, MethodError
from explainers.base import probabilities
from explainers.faithfulness import TextFaithfulness, evaluate_faithfulness

logger = logging.getLogger("labelattn.space")

MODEL_ENV = "LABELATTN_MODEL"
# The longest input explained, in tokens; longer texts are cut (and the page says so).
MAX_TOKENS = 128
# Characters accepted at all: a guard against megabyte posts through the API before tokenization.
MAX_CHARS = 2000
# The model runs one request at a time (see `Backend.lock`); a few more wait in the queue, the rest are refused.
CONCURRENCY = 2
QUEUE_SIZE = 64

PREDICTED = "predicted class"
NO_CONTRAST = "(no other class)"

# Display names, in the order the page lists them; a method registered later is appended under its own name.
METHOD_NAMES = {
    "label_attention": "Label attention",
    "integrated_gradients": "Integrated Gradients",
    "saliency": "Saliency (gradient)",
    "input_x_gradient": "Gradient × input",
    "grad_weighted_attention": "Gradient-weighted attention",
    "attention_rollout": "Attention rollout",
    "attention_flow": "Attention flow",
    "shap": "SHAP (Shapley value sampling)",
    "random": "Random (baseline)",
}
COMPARE_DEFAULT = ("label_attention", "integrated_gradients", "saliency", "input_x_gradient")

# What sets the cost of a request, per method: the option a slider sets (API parameter, label, most accepted) and
# fixed caps on the method's own refinements. The slider starts at the method's default (capped) and the server
# refuses more than the bound, so that no request holds the Space for long. Absent methods or options are skipped.
COSTS = {
    "integrated_gradients": ("n_steps", "ig_steps", "Integrated Gradients steps", 64, {"max_steps": 64}),
    "shap": ("n_samples", "shap_samples", "SHAP samples (orderings of the words)", 100, {}),
}
# SHAP evaluates the model once per word and sample: samples × words above this is refused (a TREC question of
# 20 words takes the default 25 samples in 500 evaluations).
SHAP_EVALUATIONS = 2000

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
Or point the environment variable `LABELATTN_MODEL` at a trained labelattn model: a local folder or a Hub repo id
(on a Hugging Face Space, set it as a variable of the Space).
"""


def find_model(model: str | None = None) -> str | None:
    """The model to serve: `model`, else `$LABELATTN_MODEL`, else the default trained model if it exists (looked
    for from the working directory and from the repository holding this file), else None."""
    model = model or os.environ.get(MODEL_ENV)
    if model:
        return model
    from labelattn import DEFAULT_MODEL_DIR

    for base in (Path.cwd(), Path(__file__).resolve().parents[1]):
        if (base / DEFAULT_MODEL_DIR / "config.json").is_file():
            return str(base / DEFAULT_MODEL_DIR)
    return None


class Backend:
    """The model, its tokenizer and the explainers that fit it, behind one lock.

    Gradient methods hook the model's embedding layer while they run (Captum), and a hook would alter any forward
    pass run meanwhile by another request; a fast tokenizer changing its truncation setting in two threads at once
    fails ("Already borrowed"): every use of the model or the tokenizer takes `lock`.
    """

    def __init__(self, model_path: str, max_tokens: int = MAX_TOKENS):
        self.model_path = model_path
        self.model = AutoModelForSequenceClassification.from_pretrained(model_path, trust_remote_code=True).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=True)
        config = self.model.config
        if getattr(config, "model_type", None) != "labelattn":
            raise ValueError(f"{model_path} holds a {config.model_type!r} model, not a labelattn model.")
        self.max_tokens = max_tokens
        self.labels = [config.id2label[i] for i in range(config.num_labels)]
        self.lock = threading.Lock()
        self.explainers = self._fitting_explainers()
        # The methods whose cost the page bounds, and where their slider starts.
        self.cost_defaults = {
            method: min(int(self.explainers[method].defaults[option]), bound)
            for method, (option, _, _, bound, _) in COSTS.items()
            if method in self.explainers and option in self.explainers[method].defaults
        }

    def _fitting_explainers(self) -> dict[str, Explainer]:
        """One explainer per method that fits this model, in page order; the classes themselves decide, raising
        `MethodError` for a method that needs what the model lacks (layers, label attention)."""
        order = [*METHOD_NAMES, *sorted(set(METHODS) - set(METHOD_NAMES))]
        explainers = {}
        for name in order:
            if name not in METHODS:
                continue
            try:
                explainers[name] = METHODS[name](self.model, self.tokenizer)
            except MethodError:
                continue
        return explainers

    def describe(self) -> str:
        config = self.model.config
        return (
            f"**Model** `{self.model_path}` · backbone `{config.backbone}` · pooling `{config.pooling}` · "
            f"{len(self.labels)} classes: {', '.join(self.labels)}"
        )

    def predict(self, text: str) -> dict[str, float]:
        """Class probabilities of `text` (cut to `max_tokens`), label → probability."""
        with self.lock, torch.no_grad():
            inputs = self.tokenizer(text, truncation=True, max_length=self.max_tokens, return_tensors="pt")
            logits = self.model(**inputs.to(self.model.device)).logits
        return dict(zip(self.labels, probabilities(self.model, logits)[0].tolist(), strict=True))

    def count_words(self, text: str) -> int:
        """How many words of `text` the model reads (after the cut to `max_tokens`)."""
        with self.lock:
            encoding = self.tokenizer(text, truncation=True, max_length=self.max_tokens)
        return len({w for w in encoding.word_ids() if w is not None})

    def explain(self, text: str, method: str, target: Any = None, **options) -> Explanation:
        """One explanation of `text` (cut to `max_tokens`); `target` as in `explainers.explain`."""
        if method not in self.explainers:
            raise MethodError(f"The method {method!r} does not fit this model: choose one of {list(self.explainers)}.")
        with self.lock:
            return self.explainers[method].explain(text, target=target, max_length=self.max_tokens, **options)


def user_errors(fn: Callable) -> Callable:
    """Show every failure as a `gr.Error` toast (the client gets the same message), never a stack trace: the
    explainers' own errors say what to change; anything else is logged on the server."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except (ValueError, TypeError) as error:
            raise gr.Error(str(error)) from None
        except Exception as error:
            logger.exception("request failed")
            raise gr.Error(
                f"The model failed on this input ({type(error).__name__}); the server log has details."
            ) from None

    return wrapper


def checked_text(text: str | None, max_chars: int = MAX_CHARS) -> str:
    if text is None or not text.strip():
        raise gr.Error("The text is empty: type a sentence or pick one of the examples.")
    if len(text) > max_chars:
        raise gr.Error(f"The text has {len(text)} characters; this demo takes at most {max_chars}.")
    return text


def resolve_target(backend: Backend, text: str, target: str | None, contrast: str | None) -> Any:
    """The `target=` of `explain` from the two selectors: None, a label, or a pair (a, b) for "a rather than b"."""
    target = None if target in (None, "", PREDICTED) else target
    if contrast in (None, "", NO_CONTRAST):
        return target
    if target is None:
        probs = backend.predict(text)
        target = max(probs, key=probs.get)
    if target == contrast:
        raise gr.Error(f"'Why {target} rather than {contrast}?' compares a class with itself: pick two classes.")
    return (target, contrast)


def cost_options(backend: Backend, method: str, sliders: dict[str, float | None], text: str) -> dict[str, int]:
    """The options bounding the cost of `method` on `text`: its slider's value (from `sliders`, API parameter →
    value; None takes the default), refused above the bound, and the fixed caps the method knows."""
    if method not in backend.cost_defaults:
        return {}
    option, parameter, label, bound, caps = COSTS[method]
    value = sliders.get(parameter)
    value = backend.cost_defaults[method] if value is None else value
    if not 1 <= value <= bound or int(value) != value:
        raise gr.Error(f"{label} ({parameter}) must be a whole number from 1 to {bound}, got {value}.")
    if method == "shap":
        words = backend.count_words(text)
        if value * words > SHAP_EVALUATIONS:
            raise gr.Error(
                f"SHAP with {int(value)} samples of {words} words takes {int(value) * words} model evaluations; this "
                f"demo allows {SHAP_EVALUATIONS}: lower {parameter} to {max(1, SHAP_EVALUATIONS // words)} or "
                "shorten the text."
            )
    known = backend.explainers[method].defaults
    return {option: int(value), **{k: v for k, v in caps.items() if k in known}}


def details_markdown(exp: Explanation, backend: Backend) -> str:
    """What the colours explain, and the checks a reader needs: truncation, IG's completeness."""
    name = METHOD_NAMES.get(exp.method, exp.method)
    question = f"Why **{exp.target_label}**"
    if exp.contrast_label is not None:
        question += f" rather than **{exp.contrast_label}**"
    lines = [
        f"{question}? · {name} · p({exp.target_label}) = {exp.probability:.3f}. "
        "Words towards +1 pushed towards this class, words towards −1 against it (scores scaled to the largest)."
    ]
    if exp.options:
        lines.append("Options: " + ", ".join(f"`{k}={v}`" for k, v in exp.options.items()) + ".")
    if exp.delta is not None:
        gap = (exp.score or 0.0) - (exp.baseline_score or 0.0)
        lines.append(
            f"Integrated Gradients: F(x) = {exp.score:.4f}, F(baseline) = {exp.baseline_score:.4f}, "
            f"sum of word scores = {sum(exp.scores):.4f} (should be F(x) − F(baseline) = {gap:.4f}); "
            f"convergence delta = {exp.delta:.2e}. More steps make the delta smaller."
        )
    if exp.truncated:
        lines.append(truncation_warning(exp, backend))
    return "\n\n".join(lines)


def truncation_warning(exp: Explanation, backend: Backend) -> str:
    return (
        f"⚠️ **The text was cut**: this demo reads at most {backend.max_tokens} tokens, so only the first "
        f"{len(exp.words)} words were classified and explained."
    )


def faithfulness_markdown(result: TextFaithfulness) -> str:
    tau = "undefined (one word)" if result.tau_loo is None else f"{result.tau_loo:.3f}"
    return (
        f"**Faithfulness** of this explanation for {result.target_label} (p = {result.probability:.3f}), averaged "
        f"over the top 10 %, 20 %, … 100 % of the words:\n\n"
        f"- comprehensiveness = {result.comprehensiveness:.3f}: the drop of p when the top words are removed "
        "(higher is better);\n"
        f"- sufficiency = {result.sufficiency:.3f}: the drop of p when only the top words are kept (lower is better);\n"
        f"- τ-LOO = {tau}: rank agreement of the scores with the drop of p when each word alone is removed."
    )


def heatmap_figure(exp: Explanation) -> Figure:
    """The classes × words label-attention heatmap, on a Figure of its own (pyplot's global state is not safe
    across the server's threads, and a pyplot figure would stay open)."""
    rows = len(exp.extras.get("labels", [exp.target_label]))
    figure = Figure(figsize=(max(4.0, 0.55 * len(exp.words) + 1.5), 0.45 * rows + 1.6))
    return exp.plot(ax=figure.add_subplot())


def build_demo(model: str | Backend | None = None) -> gr.Blocks:
    """The page for `model` (a loaded `Backend`, or a name for `find_model`), queued; a page that says how to get a
    model when there is none or it does not load."""
    backend, problem = (model, None) if isinstance(model, Backend) else (None, HOW_TO_GET_A_MODEL)
    path = None if backend is not None else find_model(model)
    if path is not None:
        try:
            backend = Backend(path)
        except (OSError, ValueError) as error:
            problem = f"### Could not load the model `{path}`\n{error}\n\n{HOW_TO_GET_A_MODEL}"
    with gr.Blocks(title="labelattn: why did the model decide?", analytics_enabled=False) as demo:
        gr.Markdown(
            "# labelattn: why did the model decide?\nA classifier whose classes each attend to the words they "
            "need. Type a text, pick a method, and see which words pushed the prediction."
        )
        if backend is None:
            gr.Markdown(problem, elem_id="no-model")
        else:
            gr.Markdown(backend.describe(), elem_id="model-info")
            build_page(backend)
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE)
    return demo


def build_page(backend: Backend) -> None:
    """The components and events of a loaded model (inside the Blocks context)."""
    methods = [(METHOD_NAMES.get(m, m), m) for m in backend.explainers]
    default_method = next(iter(backend.explainers))
    allows_contrast = {m: e.allows_contrast for m, e in backend.explainers.items()}
    has_heatmap = "label_attention" in backend.explainers

    with gr.Tab("Explain"):
        with gr.Row():
            with gr.Column(scale=3):
                text = gr.Textbox(
                    label="Text",
                    lines=2,
                    placeholder="Ask a question, e.g. Who wrote Hamlet ?",
                    max_length=MAX_CHARS,
                    elem_id="text",
                )
                gr.Examples(EXAMPLES, inputs=[text], label="Questions from TREC (the default data set)")
                with gr.Row():
                    method = gr.Dropdown(methods, value=default_method, label="Method", elem_id="method")
                    target = gr.Dropdown(
                        [PREDICTED, *backend.labels], value=PREDICTED, label="Why this class?", elem_id="target"
                    )
                    contrast = gr.Dropdown(
                        [NO_CONTRAST, *backend.labels],
                        value=NO_CONTRAST,
                        label="…rather than this one?",
                        info="gradient methods and SHAP",
                        interactive=allows_contrast[default_method],
                        elem_id="contrast",
                    )
                with gr.Accordion("Cost of the slow methods", open=False):
                    sliders = [
                        gr.Slider(
                            1,
                            bound,
                            value=backend.cost_defaults.get(name),
                            step=1,
                            label=label,
                            visible=name in backend.cost_defaults,
                            elem_id=parameter,
                        )
                        for name, (_, parameter, label, bound, _) in COSTS.items()
                    ]
                explain_button = gr.Button("Explain", variant="primary", elem_id="explain")
            with gr.Column(scale=2):
                prediction = gr.Label(label="Prediction", elem_id="prediction")
        highlight = gr.HighlightedText(label="Words coloured by score", show_legend=True, elem_id="highlight")
        details = gr.Markdown(label="Summary", elem_id="details")
        with gr.Row():
            heatmap = gr.Plot(
                label="Label attention: classes × words", show_label=False, visible=has_heatmap, elem_id="heatmap"
            )
            faithfulness = gr.Markdown(label="Faithfulness", elem_id="faithfulness")
        with gr.Accordion("The explanation as JSON", open=False):
            raw = gr.JSON(label="Explanation", elem_id="raw")

    with gr.Tab("Compare methods"):
        gr.Markdown("The text and target of the Explain tab, explained by several methods side by side.")
        compare_note = gr.Markdown(elem_id="compare-note")
        chosen = gr.CheckboxGroup(
            methods,
            value=[m for m in COMPARE_DEFAULT if m in backend.explainers],
            label="Methods",
            elem_id="compare-methods",
        )
        compare_button = gr.Button("Compare", variant="primary", elem_id="compare")
        with gr.Row(equal_height=False):
            panels = [
                gr.HighlightedText(label=label, visible=name in chosen.value, min_width=320, elem_id=f"compare-{name}")
                for label, name in methods
            ]

    @user_errors
    def run_predict(text: str) -> dict[str, float]:
        """Class probabilities of the text."""
        return backend.predict(checked_text(text))

    @user_errors
    def run_explain(
        text: str, method: str, target: str, contrast: str, ig_steps: float | None, shap_samples: float | None
    ) -> tuple[dict[str, float], list, str, dict]:
        """Prediction, word scores (HighlightedText), a summary, and the explanation as a dict."""
        text = checked_text(text)
        options = cost_options(backend, method, {"ig_steps": ig_steps, "shap_samples": shap_samples}, text)
        exp = backend.explain(text, method, resolve_target(backend, text, target, contrast), **options)
        return backend.predict(text), exp.to_highlighted_text(), details_markdown(exp, backend), exp.to_dict()

    @user_errors
    def run_heatmap(text: str) -> Figure:
        """The label-attention weights of every class on every word."""
        return heatmap_figure(backend.explain(checked_text(text), "label_attention"))

    @user_errors
    def run_faithfulness(explanation: dict | None) -> str:
        """Comprehensiveness, sufficiency and τ-LOO of an explanation (the dict that /explain returns)."""
        if not isinstance(explanation, dict) or not explanation:
            raise gr.Error("No explanation yet: run Explain first.")
        # The dict comes from the client: its text gets the same bound as any other, before the model sees it.
        checked_text(explanation.get("text"))
        try:
            exp = Explanation(**{**explanation, "spans": [tuple(span) for span in explanation["spans"]]})
        except (KeyError, TypeError) as error:
            raise gr.Error(f"Not an explanation returned by /explain ({error}): pass that dict unchanged.") from None
        with backend.lock:
            report = evaluate_faithfulness(backend.model, backend.tokenizer, [exp], max_length=backend.max_tokens)
        return faithfulness_markdown(report.per_text[0])

    @user_errors
    def run_compare(
        text: str,
        target: str,
        contrast: str,
        selected: list[str],
        ig_steps: float | None,
        shap_samples: float | None,
    ) -> list:
        """A note on what is explained, then one HighlightedText value per method of the page (None for the
        methods not selected, whose panels are hidden)."""
        text = checked_text(text)
        if not selected:
            raise gr.Error("Pick at least one method to compare.")
        wanted = resolve_target(backend, text, target, contrast)
        sliders = {"ig_steps": ig_steps, "shap_samples": shap_samples}
        values, alone, cut = [], [], None
        for label, name in methods:
            if name not in selected:
                values.append(None)
                continue
            # A method that cannot explain "a rather than b" explains "a" alone, and the note says so.
            own = wanted if allows_contrast[name] or not isinstance(wanted, tuple) else wanted[0]
            alone += [label] if own is not wanted else []
            exp = backend.explain(text, name, own, **cost_options(backend, name, sliders, text))
            cut = exp if exp.truncated else cut
            values.append(exp.to_highlighted_text())
        question = f"Why {wanted[0]} rather than {wanted[1]}?" if isinstance(wanted, tuple) else "Why this class?"
        note = f"**{question}**" + (f" ({', '.join(alone)}: why {wanted[0]} alone.)" if alone else "")
        if cut is not None:
            note += "\n\n" + truncation_warning(cut, backend)
        return [note, *values]

    def contrast_for(method_name: str) -> dict:
        # A method that cannot take "rather than" also clears it: a greyed-out box must not keep a class.
        if allows_contrast[method_name]:
            return gr.update(interactive=True)
        return gr.update(interactive=False, value=NO_CONTRAST)

    method.change(contrast_for, method, contrast, api_visibility="private")
    explained = gr.on(
        [explain_button.click, text.submit],
        run_explain,
        inputs=[text, method, target, contrast, *sliders],
        outputs=[prediction, highlight, details, raw],
        api_name="explain",
    )
    if has_heatmap:
        explained.success(run_heatmap, inputs=[text], outputs=[heatmap], api_name="heatmap")
    explained.success(run_faithfulness, inputs=[raw], outputs=[faithfulness], api_name="faithfulness")
    chosen.change(
        lambda sel: [gr.update(visible=m in sel) for _, m in methods], chosen, panels, api_visibility="private"
    )
    compare_button.click(
        run_compare,
        inputs=[text, target, contrast, chosen, *sliders],
        outputs=[compare_note, *panels],
        api_name="compare",
    )
    # API only: the probabilities alone, the cheapest call.
    gr.api(run_predict, api_name="predict")


def main() -> None:
    """`python app.py`: serve on `$GRADIO_SERVER_NAME` (a Space sets 0.0.0.0) or loopback."""
    logging.basicConfig(level=logging.INFO)
    build_demo().launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), ssr_mode=False)


if __name__ == "__main__":
    main()
