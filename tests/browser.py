"""A real headless Chromium for the page tests (Debian's ``chromium``; ``make test`` installs it):
:class:`Chromium` draws a page (its DOM after its scripts ran, or a screenshot), :class:`Dom`
reads the drawn page. Importable by the test modules (``from browser import ...``)."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

__all__ = ["CHROMIUM", "Chromium", "Dom"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """Headless Chromium, one run per page: the DOM after the page's scripts ran for
    ``budget_ms`` of virtual time, or a screenshot."""

    def __init__(self, profile: Path) -> None:
        assert CHROMIUM is not None
        self.command = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # root in a container
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={profile}",
        ]

    def dom(self, url: str, budget_ms: int = 5000) -> str:
        done = subprocess.run(
            [*self.command, f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def screenshot(self, url: str, path: Path) -> None:
        done = subprocess.run(
            [
                *self.command,
                "--virtual-time-budget=3000",
                "--hide-scrollbars",
                "--window-size=1280,960",
                f"--screenshot={path}",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]


class Dom(HTMLParser):
    """The drawn page: the text of each element with an id (a table row: ``row-<version>``;
    cells start with ``|``), and the attributes of every element."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.text: dict[str, str] = {}
        self.elements: list[dict[str, str]] = []
        self._open: list[str | None] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append({"tag": tag, **attributes})
        if tag == "td":
            self.handle_data("|")
        if tag == "tr" and "data-version" in attributes:
            attributes["id"] = f"row-{attributes['data-version']}"
        if tag not in ("br", "meta", "input", "img", "link"):
            self._open.append(attributes.get("id"))

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for element_id in self._open:
            if element_id:
                self.text[element_id] = self.text.get(element_id, "") + data

    def find(self, **attrs: str) -> list[dict[str, str]]:
        return [e for e in self.elements if all(e.get(k) == v for k, v in attrs.items())]
