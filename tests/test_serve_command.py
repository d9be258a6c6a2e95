"""manage.py serve refuses settings it cannot honour before it starts anything."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--workers", "-1"], "--workers must be 0 or more, got -1"),
        (["--port", "99999"], "--port must be from 0 to 65535, got 99999"),
    ],
)
def test_bad_options_are_refused_naming_them(args, refusal):
    with pytest.raises(CommandError, match=refusal):
        call_command("serve", *args, stdout=StringIO())
