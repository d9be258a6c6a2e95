"""Start the dashboard the embedded way: one process serves pages and sockets and runs runs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from plans.roles import roles_ensure, roles_ensure_group

# The demo shop's own group of deciders, made like reviewers.
DEMO_GROUP = "finance"
DEMO_USERS = {
    # username: (password, groups)
    "author": ("author-demo-pass", ["authors"]),
    "author2": ("author2-demo-pass", ["authors"]),
    "reviewer": ("reviewer-demo-pass", ["reviewers"]),
    # A second reviewer for the two-person rule, and finance (the demo shop's rules route
    # refunds of undelivered orders there: plans.demo.approval_rules).
    "reviewer2": ("reviewer2-demo-pass", ["reviewers"]),
    "finance": ("finance-demo-pass", ["reviewers", "finance"]),
    "operator": ("operator-demo-pass", ["operators"]),
}


class Command(BaseCommand):
    help = "Migrate, create the demo users, start in-process workers, and serve the dashboard."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--workers", type=int, default=2, help="in-process run workers (0: use separate ones)"
        )
        parser.add_argument(
            "--worker-processes",
            type=int,
            default=0,
            help="run workers in this many `run_worker` processes beside this one, each with "
            "--workers threads, instead of in this process (default 0)",
        )
        parser.add_argument("--no-demo-users", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["workers"] < 0:
            raise CommandError(f"--workers must be 0 or more, got {options['workers']}")
        processes = options["worker_processes"]
        if processes < 0:
            raise CommandError(f"--worker-processes must be 0 or more, got {processes}")
        if processes and not options["workers"]:
            raise CommandError("--worker-processes needs --workers of at least 1 (per process)")
        if not 0 <= options["port"] <= 65535:
            raise CommandError(f"--port must be from 0 to 65535, got {options['port']}")
        call_command("migrate", interactive=False, verbosity=0)
        roles_ensure()
        if not options["no_demo_users"]:
            self._ensure_demo_users()

        # Why here: after migrate, so the worker side is imported with the tables in place and
        # just before gc_tune_for_serving freezes what start-up imported.
        from plans.runtime.sweeper import start_sweeper_thread
        from plans.runtime.worker import gc_tune_for_serving, start_worker_threads

        children: list[subprocess.Popen[bytes]] = []
        if processes:
            children = _worker_processes(processes, threads=options["workers"])
        elif options["workers"]:
            start_worker_threads(options["workers"], prefix=f"{socket.gethostname()}-serve")
            start_sweeper_thread()
        from plans.notifications.dispatch import notifier_start  # why: as the two above

        notifier_start()  # retries left pending by an earlier process go out without waiting

        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        from agentsite.asgi import application

        gc_tune_for_serving()
        url = f"http://{options['host']}:{options['port']}/"
        self.stdout.write(self.style.SUCCESS(f"agentsite is serving on {url}"))
        engine = str(settings.DATABASES["default"]["ENGINE"])
        where = (
            f"{processes} worker processes x {options['workers']} threads"
            if processes
            else f"workers in process: {options['workers']}"
        )
        self.stdout.write(
            f"database: {engine.rsplit('.', 1)[-1]}, "
            f"model: {settings.AGENTSITE_MODEL_BACKEND}, {where}"
        )
        server = Server(
            application=ASGIStaticFilesHandler(application),
            endpoints=build_endpoint_description_strings(
                host=options["host"], port=options["port"]
            ),
            verbosity=0,
        )
        try:
            server.run()
        finally:
            _stop(children)
        if not server.listening_addresses:
            # Daphne logs why and stops; without this the command would end as if it had served.
            raise CommandError(f"could not listen on {options['host']}:{options['port']}")

    def _ensure_demo_users(self) -> None:
        from django.contrib.auth.models import Group

        users = get_user_model().objects
        roles_ensure_group(DEMO_GROUP, like="reviewers")
        self.stdout.write("Demo users (username / password):")
        for username, (password, groups) in DEMO_USERS.items():
            user, created = users.get_or_create(username=username)
            if created:
                user.set_password(password)
                user.save()
            user.groups.add(*Group.objects.filter(name__in=groups))
            shown = password if created or user.check_password(password) else "(changed)"
            self.stdout.write(f"  {username:<10} {shown:<20} {', '.join(groups)}")


# A worker process stopping lets its runs reach a stop for up to its --grace (10 s) first.
STOP_WAIT_S = 15.0


def _worker_processes(count: int, *, threads: int) -> list[subprocess.Popen[bytes]]:
    """`run_worker` processes with this one's settings (its environment), each with a sweeper:
    runs are advanced beside the web process, past the one interpreter lock it has."""
    manage = Path(settings.BASE_DIR) / "manage.py"
    prefix = f"{socket.gethostname()}-{os.getpid()}-serve"
    return [
        subprocess.Popen(  # noqa: S603 - this interpreter, this project's manage.py
            [
                sys.executable,
                str(manage),
                "run_worker",
                "--threads",
                str(threads),
                "--worker-id",
                f"{prefix}-p{index + 1}",
            ],
            env=os.environ.copy(),
            preexec_fn=_end_with_parent,  # only prctl, before exec
        )
        for index in range(count)
    ]


def _end_with_parent() -> None:
    """In the child before exec: SIGTERM it if this process dies (killed, not stopped), so no
    worker outlives its server (Linux's PR_SET_PDEATHSIG; elsewhere stopping does it)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    """Stop the worker processes as run_worker stops on SIGTERM: runs finish or are handed over."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
