"""Where a benchmark writes its latest table: between its own markers in a docs page, so reruns replace it."""

import re
from pathlib import Path


def write_into_docs(table: str, path: Path, name: str) -> None:
    """Replace the text between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` in `path` by `table` (the
    block is added at the end of the page when the markers are missing)."""
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = path.read_text() if path.exists() else ""
    block = f"{begin}\n{table}\n{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = f"{text.rstrip()}\n\n{block}\n"
    path.write_text(text)
