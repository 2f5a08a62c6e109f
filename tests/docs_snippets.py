"""Code blocks of the docs, by name: a block is marked with ``<!-- snippet: NAME -->`` on the line
before its fence (``quickstart`` in README.md; ``clicks.yaml``, ``setup``, ``before``, ``after``
in docs/spark.md), so the tests run what the page says, as written."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def snippet(page: str, name: str) -> str:
    """The code of the block marked ``name`` in ``page`` (relative to the repository), with the
    indentation of its list item removed."""
    text = (ROOT / page).read_text()
    pattern = rf"<!-- snippet: {re.escape(name)} -->[ \t]*\n([ \t]*)```[\w.-]*\n(.*?)\n\1```"
    found = re.search(pattern, text, re.S)
    assert found is not None, f"no block marked <!-- snippet: {name} --> in {page}"
    return textwrap.dedent(found.group(2)) + "\n"
