"""The model card (README.md with Hub metadata) of a trained model, and its push to the Hugging Face Hub.

The folder pushed is built by `stage_for_hub`, which the tests load back from a Hub-cache layout: what is
tested is what would be uploaded.
"""

import re
import shutil
import tempfile
from pathlib import Path

import httpx
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, constants, get_token
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from labelattn.coding import shown
from labelattn.data.records import LabelledData
from labelattn.training import backbones, checkpoints
from labelattn.training.settings import TrainSettings

# Files a model folder must hold to load with trust_remote_code=True (a fast tokenizer saves tokenizer.json).
REQUIRED = ("README.md", "config.json", "model.safetensors", "configuration_labelattn.py", "modeling_labelattn.py")
REQUIRED += ("tokenizer.json", "tokenizer_config.json")
# Training state (large, and of no use to someone loading the model), and the lock of the run writing the folder.
NOT_UPLOADED = (checkpoints.CHECKPOINTS, checkpoints.LOCK)
POOLING_TEXT = {
    "label_attention": "a label-attention head: every class owns a learned query that attends over the tokens, and "
    "the attention weights show which words each class read",
    "mean": "mean pooling of the token vectors and a linear layer (the baseline of the label-attention head)",
}
# Where the embedding backbone's token table started (`labelattn train --embeddings`).
EMBEDDINGS_TEXT = {
    "minilm-input": "all-MiniLM-L6-v2's input embeddings (PCA to the model's width)",
    "model2vec": "Model2Vec vectors distilled from all-MiniLM-L6-v2",
    "random": "random vectors",
}


def embedding_backbone_text(settings: TrainSettings) -> str:
    """How the embedding backbone was built and trained, from the run's settings."""
    start = EMBEDDINGS_TEXT[settings.embeddings]
    table = "kept frozen" if settings.freeze_embeddings else "then trained"
    width = settings.token_context_width
    context = f"with a residual convolution over {width} neighbouring tokens" if width else "as a bag of tokens"
    return f"{backbones.description('embedding')} starting from {start}, {table}, {context}"


# A row of the card's split table (`model_card`): split, rows, ids hash.
SPLIT_ROW = re.compile(r"^\| (\w+) \| \d+ \| `([0-9a-f]+)` \|$", re.MULTILINE)


def recorded_splits(folder: Path) -> dict[str, str]:
    """The ids hash of each split that the card of `folder` records (none if it has no card, or another one)."""
    card = Path(folder) / "README.md"
    return dict(SPLIT_ROW.findall(card.read_text(encoding="utf-8", errors="replace"))) if card.is_file() else {}


def recorded_license(folder: Path) -> str | None:
    """The licence the card of `folder` names, or None (no card, or metadata that does not parse)."""
    import yaml

    card = Path(folder) / "README.md"
    try:
        return ModelCard.load(card).data.license if card.is_file() else None
    except (OSError, ValueError, yaml.YAMLError):
        return None


class CardError(ValueError):
    """A model folder that cannot be pushed as it is."""


def card_metadata(data: LabelledData, settings: TrainSettings, scores: dict[str, dict], name: str) -> ModelCardData:
    """The YAML block the Hub reads: library, task, licence, data, metrics and a model-index of the test results."""
    dataset = data.source.hub_id or data.source.name
    results = [
        EvalResult(
            task_type="text-classification",
            dataset_type=dataset,
            dataset_name=f"{data.source.name} ({split} split, seed {data.split_record['seed']})",
            dataset_split=split,
            metric_type=metric.replace("macro_f1", "f1").replace("micro_f1", "f1"),
            metric_name=metric.replace("_", "-"),
            metric_value=round(value, 4),
            metric_config=metric.split("_")[-2] if "f1" in metric else None,  # macro, micro
        )
        for split in ("validation", "test")
        for metric, value in scores[split].items()
    ]
    return ModelCardData(
        language=data.source.language,
        license=settings.license,
        library_name="transformers",
        pipeline_tag="text-classification",
        tags=["labelattn", "label-attention", "text-classification", "custom_code", "explainability"],
        datasets=[dataset],
        metrics=["accuracy", "f1"],
        base_model=backbones.base_model(settings.backbone),
        model_name=name,
        eval_results=results,
    )


def _usage(repo: str, example: str, multi_label: bool) -> str:
    probabilities = "logits.sigmoid()" if multi_label else "logits.softmax(-1)"
    return f"""```python
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

model = AutoModelForSequenceClassification.from_pretrained("{repo}", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("{repo}", trust_remote_code=True)
inputs = tokenizer([{example!r}], return_tensors="pt", truncation=True)
with torch.no_grad():
    probabilities = model(**inputs).{probabilities}[0]
print({{model.config.id2label[i]: round(p, 3) for i, p in enumerate(probabilities.tolist())}})
```"""


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def rate_row(what: str, target: str, rate: dict) -> str:
    """A row of the coding-rate table: the threshold chosen on validation and what it gives on both splits."""
    threshold = "none reached it" if rate["threshold"] is None else shown(rate["threshold"])
    validation, test = rate["validation"], rate["test"]
    return (
        f"| {float(target):.0%} | {what} | {threshold} | {percent(validation['rate'])} | "
        f"{percent(validation['accuracy'])} | **{percent(test['rate'])}** | {percent(test['accuracy'])} |"
    )


def coding_section(coding: dict, repo: str) -> str:
    """What the card says of the calibration and of the automatic coding rate (`labelattn.training.coding_report`)."""
    errors = coding["expected_calibration_error"]["test"]
    rows = [rate_row("class", target, rate) for target, rate in coding["coding_rate"].items()]
    for level, rates in coding.get("levels", {}).items():
        rows += [rate_row(f"{level} alone", target, rate) for target, rate in rates.items()]
    fallback = coding.get("fallback")
    for target in (t for t in fallback if t != "levels") if fallback else []:
        chain = " > ".join(fallback["levels"])
        result = fallback[target]
        rate = {"threshold": None, "validation": result["validation"], "test": result["test"]}
        rows.append(rate_row(f"falling back {chain}", target, rate).replace("none reached it", "one per level"))
    coarser = (
        " Where the class is unsure, a text can be coded at a coarser level (the group's probability is the sum of "
        "its classes'), each level with its own threshold, chosen in turn on the texts the finer levels left."
        if fallback
        else ""
    )
    return f"""## Calibration and automatic coding rate

The probabilities are calibrated: the model divides its logits by a temperature, T = {coding["temperature"]:.4f}
(`temperature` in config.json), fitted on the validation split after training (temperature scaling: the
predictions are unchanged). Expected calibration error on the test split ({coding["bins"]} equal-width bins of the
{coding["confidence"]}): **{errors["before"]:.4f} before, {errors["after"]:.4f} after**.

The automatic coding rate is the share of texts the model codes alone, leaving the rest to people, while keeping a
target accuracy on those it codes: a text is coded when its {coding["confidence"]} reaches a threshold, chosen on
the validation split (the largest share of texts with that accuracy) and measured on the test split.{coarser}

| target | level | threshold (validation) | coded, validation | accuracy, validation | coded, test | accuracy, test |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

![Reliability diagram](reliability.png) ![Coverage against accuracy](coverage-accuracy.png)

The thresholds for 80% to 99% are in `coding.json`: `labelattn predict {repo} DATA --target-accuracy 0.95` writes a
`manual` column that says which rows a person should code.
"""


def model_card(
    data: LabelledData,
    settings: TrainSettings,
    scores: dict[str, dict],
    repo_id: str | None = None,
    coding: dict | None = None,
    averaged: list[TrainSettings] | None = None,
) -> ModelCard:
    """The card of a model trained by `labelattn train` with `settings` on `data`, scoring `scores` per split, with the
    calibration and coding rates of `coding` (`labelattn.training.coding_report`) if given; of the mean of the weights
    of the runs `averaged`, if given (`labelattn average`, whose command `settings` then holds). The card's sections in
    reading order, one after another: long as the card is, not branched."""
    name = repo_id.split("/")[-1] if repo_id else Path(settings.output_dir).name
    backbone = backbones.description(settings.backbone, settings.encoder_layers)
    if backbones.backbone_kind(settings.backbone) == "embedding":
        backbone = embedding_backbone_text(settings)
    record = data.split_record
    split_rows = "\n".join(
        f"| {split} | {record['sizes'][split]} | `{record['ids_sha256'][split]}` |" for split in record["sizes"]
    )
    metric_names = list(scores["test"])
    score_rows = "\n".join(
        f"| {split} | " + " | ".join(f"{scores[split][m]:.4f}" for m in metric_names) + " |"
        for split in ("validation", "test")
    )
    labels = ", ".join(f"`{i}` {label}" for i, label in enumerate(data.label_names))
    held_out = (
        f"The {' and '.join(record['held_out'])} split(s) were held out of the training data"
        f"{', stratified by class' if record['stratified'] else ''}, with seed {record['seed']} "
        "(`datasets.Dataset.train_test_split`); the ids hash below is the first 16 hex digits of the SHA-256 of the "
        "sorted row ids, joined by commas."
        if record["held_out"]
        else "Each split came from its own file."
    )
    if record.get("untrained_classes"):
        untrained = ", ".join(f"`{name}`" for name in record["untrained_classes"])
        held_out += (
            f"\n\nNo training row has the class(es) {untrained}: their label-attention queries are computed from "
            "their descriptions alone, by the map the other classes trained (`--label-descriptions`)."
        )
    example = data.splits["test"][0]["text"][:200]
    commands = [run.command_line for run in averaged or ()] + [settings.command_line]
    averaging = (
        f"""
The weights are the mean of those of the {len(averaged)} runs above (`labelattn average`; the first run's settings are
the ones described), which started from the initial values of seed {averaged[0].initial_seed} and saw the data in
the orders of seeds {", ".join(str(run.seed) for run in averaged)}. The temperature and the coding thresholds were
fitted again, on the validation split.
"""
        if averaged
        else ""
    )
    body = f"""
# {name}

A {"multi-label" if data.multi_label else "single-label"} text classifier made with
[labelattn](https://github.com/labelattn/labelattn): {backbone}, read by {POOLING_TEXT[settings.pooling]}.

Labels ({len(data.label_names)}): {labels}.

## Data

{data.source.description}

- Licence of the data: {data.source.license}.
- Source: {data.source.citation or data.source.name}

{held_out}

| split | rows | ids sha256 |
|---|---|---|
{split_rows}

## Results

| split | {" | ".join(m.replace("_", "-") for m in metric_names)} |
|---|{"---|" * len(metric_names)}
{score_rows}

{coding_section(coding, repo_id or str(settings.output_dir)) if coding else ""}
## Training

```bash
{chr(10).join(commands)}
```

{settings.epochs} epochs, batch size {settings.batch_size} per process, AdamW (learning rate
{settings.learning_rate}, head {settings.head_learning_rate}, weight decay {settings.weight_decay}) with a linear
schedule and {settings.warmup_ratio:.0%} warm-up, at most {settings.max_length} tokens per text, seed {settings.seed},
with Hugging Face Accelerate.
{averaging}

## Usage

The model's code ships in this repository (`modeling_labelattn.py`), hence `trust_remote_code=True` (the
tokenizer is a plain BERT WordPiece one, but `AutoTokenizer` reads the model's config first):

{_usage(repo_id or str(settings.output_dir), example, data.multi_label)}

With `output_attentions=True` the output holds `label_attentions` `(batch, heads, num_labels, seq_len)`: the weights
each class put on each token. The `explainers` package of labelattn turns them (or Integrated Gradients, SHAP, ...) into
word scores: `explain(model, tokenizer, text, method="label_attention")`.
"""
    return ModelCard(f"---\n{card_metadata(data, settings, scores, name).to_yaml()}\n---\n{body}")


def write_model_card(
    folder: Path,
    data: LabelledData,
    settings: TrainSettings,
    scores: dict[str, dict],
    repo_id: str | None = None,
    coding: dict | None = None,
    averaged: list[TrainSettings] | None = None,
) -> Path:
    """Write README.md into `folder`; returns its path."""
    path = Path(folder) / "README.md"
    model_card(data, settings, scores, repo_id, coding, averaged).save(path)
    return path


def stage_for_hub(model_dir: Path, staging_dir: Path) -> Path:
    """Copy into `staging_dir` exactly the files to upload: the model folder without its training checkpoints."""
    model_dir, staging_dir = Path(model_dir), Path(staging_dir)
    missing = [name for name in REQUIRED if not (model_dir / name).is_file()]
    if missing:
        raise CardError(f"{model_dir} lacks {missing}: is it a folder written by `labelattn train`?")
    ModelCard.load(model_dir / "README.md")  # a card the Hub would reject fails here, before any upload
    staging_dir.mkdir(parents=True, exist_ok=True)
    for path in model_dir.iterdir():
        if path.name not in NOT_UPLOADED and path.is_file():
            shutil.copy2(path, staging_dir / path.name)
    return staging_dir


def check_can_push(repo_id: str, token: str | None = None) -> None:
    """Refuse at once (before a training run) a push that cannot work: a malformed repository id, the Hub switched
    off (HF_HUB_OFFLINE), no login, or a login the Hub does not confirm."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise CardError(
            f"--push-to-hub {repo_id!r} is not a Hub repository id ({error}); write it as 'your-name/model-name'."
        ) from None
    if constants.HF_HUB_OFFLINE:
        raise CardError(
            "--push-to-hub: the Hub is switched off here (HF_HUB_OFFLINE=1), so the model could not be pushed; "
            "unset HF_HUB_OFFLINE, or train without --push-to-hub and push the folder later with "
            "labelattn.training.card.push_to_hub(folder, repo_id)."
        )
    token = token or get_token()
    if token is None:
        raise CardError("--push-to-hub: not logged in to the Hugging Face Hub; run `hf auth login` or set HF_TOKEN.")
    try:
        HfApi(token=token).whoami()
    except (OSError, httpx.HTTPError) as error:
        raise CardError(
            f"--push-to-hub: the Hub did not confirm the login ({type(error).__name__}: {error}); check the network "
            "and the token, or train without --push-to-hub."
        ) from None


def push_to_hub(model_dir: Path, repo_id: str, private: bool = False, token: str | None = None) -> str:
    """Create `repo_id` if needed and upload the staged model folder in one commit; returns the commit URL."""
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory() as staging:
        folder = stage_for_hub(model_dir, Path(staging))
        try:
            api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
            commit = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="Upload labelattn model")
        except (OSError, httpx.HTTPError) as error:
            raise CardError(f"the upload to {repo_id} failed ({type(error).__name__}: {error}).") from None
    return commit.commit_url
