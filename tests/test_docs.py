"""The options tables of docs/explainers.md are the methods' own declarations (`explainers.options`), so that the
docs say what the code accepts: `explainers.options.write_options_tables("docs/explainers.md")` rewrites them."""

from pathlib import Path

import pytest

from explainers import METHODS
from explainers.options import options_table

PAGE = Path(__file__).resolve().parents[1] / "docs" / "explainers.md"


@pytest.mark.parametrize(
    "name", [name for name, method in METHODS.items() if method.__module__.startswith("explainers.")]
)
def test_every_method_has_its_options_table(name):
    text = PAGE.read_text(encoding="utf-8")
    block = f"<!-- options:{name} -->\n{options_table(METHODS[name].all_options())}\n<!-- /options:{name} -->"
    assert block in text, f"run write_options_tables('docs/explainers.md') (after placing a block for {name})"
