"""The README's examples run as written: every ```python block, and every `labelattn ... --help`; every `labelattn`
command of the README and docs/ parses."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import save_model

from labelattn.cli import COMMANDS

README = Path(__file__).resolve().parents[1] / "README.md"
# A block right after this marker needs what tests cannot have (the Hub, a GPU): it is only compiled.
NOT_RUN = "<!-- not run in tests"


def python_blocks() -> list[tuple[int, str, bool]]:
    """`(line, code, runnable)` of each ```python block of the README."""
    text = README.read_text()
    blocks = []
    for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
        before = text[: match.start()].rstrip().splitlines()[-1] if match.start() else ""
        blocks.append((text[: match.start()].count("\n") + 1, match.group(1), not before.startswith(NOT_RUN)))
    return blocks


def test_readme_has_examples_and_two_setup_commands():
    assert len(python_blocks()) >= 3
    text = README.read_text()
    assert "make demo" in text and "make test" in text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, planted_embedding_model, tokenizer):
    """A folder where `models/trec-embedding` holds a (small) trained model, as after `make demo`."""
    folder = tmp_path_factory.mktemp("readme")
    save_model(planted_embedding_model, tokenizer, folder / "models" / "trec-embedding")
    return folder


@pytest.mark.parametrize("line,code,runnable", python_blocks(), ids=[f"line{block[0]}" for block in python_blocks()])
def test_readme_python_block_runs(line, code, runnable, workdir):
    compile(code, f"README.md:{line}", "exec")
    if not runnable:
        return
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, f"README.md block at line {line} failed:\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("command", [[], *[[name] for name in COMMANDS]])
def test_cli_help_explains_itself(command):
    result = subprocess.run(
        [sys.executable, "-m", "labelattn.cli", *command, "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "usage: labelattn" in result.stdout
    assert len(result.stdout.splitlines()) > 4


# A placeholder the docs' commands use for a number (`--seed S`, `--seed $seed` in a loop): checked as 0.
PLACEHOLDER = re.compile(r"^(\$\w+|[A-Z])$")


def labelattn_commands(page: Path) -> list[tuple[str, list[str]]]:
    """`(page:line, arguments)` of each `labelattn ...` command of a page's ```bash blocks, and of each `... -m
    labelattn ...` (`accelerate launch`): continuation lines joined, comments dropped, the line the command starts."""
    text = page.read_text()
    commands = []
    for match in re.finditer(r"```bash\n(.*?)```", text, flags=re.S):
        line = text[: match.start()].count("\n") + 2
        for command in re.split(r"(?<!\\)\n", match.group(1)):
            words = [
                "0" if PLACEHOLDER.match(w) else w for w in shlex.split(command.replace("\\\n", " "), comments=True)
            ]
            where = f"{page.name}:{line}"
            if words[:1] == ["labelattn"]:
                commands.append((where, words[1:]))
            elif "labelattn" in words and words[words.index("labelattn") - 1] == "-m":
                commands.append((where, words[words.index("labelattn") + 1 :]))
            line += command.count("\n") + 1
    return commands


DOCUMENTED = [c for page in [README, *sorted((README.parent / "docs").glob("*.md"))] for c in labelattn_commands(page)]


@pytest.mark.parametrize(("where", "arguments"), DOCUMENTED, ids=[where for where, _ in DOCUMENTED])
def test_documented_labelattn_commands_parse(where, arguments):
    """Every `labelattn` command the README and docs/ show is one the parser takes, and a `train` command's options
    pass every check of its settings: a recipe copied from the docs trains (the data and folders it names aside)."""
    from labelattn.cli import build_parser
    from labelattn.training.settings import TrainSettings

    try:
        args = build_parser().parse_args(arguments)
    except SystemExit:
        pytest.fail(f"{where}: `labelattn {' '.join(arguments)}` does not parse")
    if args.command == "train":
        TrainSettings.from_args(args)
