"""Reading rendered pages in view tests."""

import re


def section(page: str, heading_id: str) -> str:
    """The HTML of the <section> labelled by the heading with this id."""
    match = re.search(rf'<section[^>]*aria-labelledby="{heading_id}".*?</section>', page, re.S)
    assert match, f"no section {heading_id}"
    return match.group(0)
