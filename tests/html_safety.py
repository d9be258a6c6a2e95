"""Hostile text for escaping tests, and a check that a page holds no markup that could run."""

from html.parser import HTMLParser

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
DOT_BREAKER = '"]; x [label="'
MULTILINE = "line one\nline two {braces} }"


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self._script_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._check(tag, attrs)
        if tag == "script":
            self._script_depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._check(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script_depth:
            self._script_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._script_depth and "alert" in data:
            self.problems.append(f"script body: {data[:60]!r}")

    def _check(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}={value!r}>")
            if name.endswith("href") and (value or "").strip().lower().startswith("javascript:"):
                self.problems.append(f"<{tag} {name}={value!r}>")
        if tag == "script" and not values.get("src"):
            self.problems.append("an inline <script>")
        if tag in ("img", "foreignobject", "iframe", "object", "embed") and (
            values.get("src") == "x" or tag != "img"
        ):
            self.problems.append(f"<{tag}>")


def executable_markup(html: str) -> list[str]:
    """Every event handler, javascript: link, inline script or injected element in the page."""
    parser = _Markup()
    parser.feed(html)
    parser.close()
    return parser.problems
