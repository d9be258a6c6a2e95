"""manage.py serve refuses settings it cannot honour before it starts anything; its demo users."""

import os
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--workers", "-1"], "--workers must be 0 or more, got -1"),
        (["--port", "99999"], "--port must be from 0 to 65535, got 99999"),
        (["--worker-processes", "-1"], "--worker-processes must be 0 or more, got -1"),
        (
            ["--worker-processes", "2", "--workers", "0"],
            "--worker-processes needs --workers of at least 1",
        ),
    ],
)
def test_bad_options_are_refused_naming_them(args, refusal):
    with pytest.raises(CommandError, match=refusal):
        call_command("serve", *args, stdout=StringIO())


@pytest.mark.multiprocess
def test_a_port_already_taken_ends_serve_with_an_error_not_a_success(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "AGENTSITE_SQLITE_PATH": str(tmp_path / "db.sqlite3")}
        serve = ["manage.py", "serve", "--port", str(port), "--workers", "0", "--no-demo-users"]
        result = subprocess.run(  # noqa: S603 - our own command line, with a port we chose
            [sys.executable, *serve],
            cwd=Path(__file__).resolve().parents[2],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert result.returncode != 0
    assert f"could not listen on 127.0.0.1:{port}" in result.stderr


@pytest.mark.django_db
def test_the_demo_users_include_a_second_reviewer_and_finance_which_may_decide():
    from django.contrib.auth.models import User

    from plans.management.commands.serve import Command
    from plans.roles import may_decide, roles_ensure

    roles_ensure()
    Command(stdout=StringIO())._ensure_demo_users()

    finance = User.objects.get(username="finance")
    assert set(finance.groups.values_list("name", flat=True)) == {"reviewers", "finance"}
    assert may_decide(User.objects.get(username="reviewer2"))
    assert set(
        Group.objects.get(name="finance").permissions.values_list("codename", flat=True)
    ) == {"decide_approval", "view_all_runs"}
