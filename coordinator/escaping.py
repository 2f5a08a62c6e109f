"""Names that come from processors (processor ids, location ids, task names) shown to people:
one escaping helper per medium.

- :func:`script_json`: JSON to embed in an HTML ``<script>`` element: ``<``, ``>``, ``&`` and
  the JavaScript line separators become ``\\uXXXX`` escapes, so no id (``</script>``,
  ``<!--<script>``) can end the element or change how the browser parses it;
- :func:`terminal_text`: text for a terminal: each control character (escape, bell, newline...)
  shown as a Python escape (``\\x1b``), so an id cannot clear the screen or set the title;
- :func:`rich_text`: text inside rich markup: :func:`terminal_text`, then rich's own escape, so
  ``p-markup[/]`` prints as written.

Usage::

    html = PAGE.replace("__STATUS__", script_json(document))
    print(f"  {terminal_text(processor_id)}")
    console.print(f"[bold]{rich_text(processor_id)}[/]")
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

__all__ = ["rich_text", "script_json", "terminal_text"]

_SCRIPT_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def script_json(document: Any) -> str:
    """``document`` as JSON safe inside an HTML ``<script>`` element (the same value to
    ``JSON.parse``)."""
    return json.dumps(document, sort_keys=True).translate(_SCRIPT_ESCAPES)


def terminal_text(text: object) -> str:
    """``str(text)`` with every non-printable character shown as its escape."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in value)


def rich_text(text: object) -> str:
    """``str(text)`` safe inside rich markup and on a terminal."""
    return escape(terminal_text(text))
