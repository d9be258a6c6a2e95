"""Web hardening: a nonce-based Content Security Policy on every page; check --deploy is clean."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_every_page_carries_a_csp_whose_nonce_its_scripts_use(client, author):
    client.force_login(author)
    for path in ("/", "/runs/", "/approvals/", "/accounts/login/"):
        response = client.get(path, follow=True)
        policy = response.headers["Content-Security-Policy"]
        nonce = re.search(r"'nonce-([^']+)'", policy).group(1)
        scripts = re.findall(r"<script\b[^>]*>", response.content.decode())

        assert "script-src 'self' 'nonce-" in policy
        assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
        assert "frame-ancestors 'none'" in policy
        assert scripts and all(f'nonce="{nonce}"' in tag for tag in scripts), path


def test_check_deploy_reports_nothing_with_the_production_settings(tmp_path):
    env = {
        **os.environ,
        "AGENTSITE_DEBUG": "0",
        "AGENTSITE_SECRET_KEY": secrets.token_urlsafe(50),
        "AGENTSITE_ALLOWED_HOSTS": "agents.example.com",
        "AGENTSITE_VAR_DIR": str(tmp_path),
    }

    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
