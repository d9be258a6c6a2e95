"""Real receivers on loopback: an HTTP server for webhooks, aiosmtpd for email."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from plans.notifications.dispatch import notifier
from plans.notifications.signing import signature_valid


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A webhook receiver; each path behaves as its name says (ok, fail-twice, hang, redirect)."""

    url: str
    secret: str
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def verified(self, request: Received) -> bool:
        """Checks the signature as the documented snippet does."""
        return signature_valid(
            self.secret,
            request.headers.get("X-Agentsite-Timestamp", ""),
            request.body,
            request.headers.get("X-Agentsite-Signature", ""),
        )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    attempts: dict[str, int] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = Received(self.path, dict(self.headers.items()), body)
            with state.lock:
                state.received.append(request)
                attempts[self.path] = attempts.get(self.path, 0) + 1
                count = attempts[self.path]
            if self.path == "/hang":
                state.release.wait(60)
                return
            if self.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", f"{state.url}/ok")
                self.end_headers()
                return
            failing = self.path == "/fail-twice" and count <= 2
            if not state.verified(request):
                failing = True
            self.send_response(500 if failing else 204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}", secret="s3cret-for-tests")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def notifications_on(settings) -> Iterator[None]:
    """The notifier as in production, with short waits; stopped before the database is reset."""
    settings.AGENTSITE_NOTIFICATIONS = True
    settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE = True  # the receivers are on loopback
    settings.AGENTSITE_NOTIFY_RETRY_BASE_S = 0.05
    settings.AGENTSITE_NOTIFY_RETRY_CAP_S = 0.2
    settings.AGENTSITE_NOTIFY_POLL_S = 0.05
    settings.AGENTSITE_APPROVAL_EMAIL_DELAY_S = 0.2
    settings.AGENTSITE_WEBHOOK_TIMEOUT_S = 5
    yield
    notifier.stop()


@dataclass
class Mailbox:
    """What a real SMTP server on loopback (aiosmtpd) received."""

    messages: list[Any] = field(default_factory=list)

    def to(self, address: str) -> list[Any]:
        return [m for m in self.messages if address in m["envelope_to"]]


@pytest.fixture
def smtp_server(settings) -> Iterator[Mailbox]:
    """aiosmtpd on a free loopback port; Django sends through it with the SMTP backend."""
    from email import message_from_bytes
    from email.policy import default

    from aiosmtpd.controller import Controller

    mailbox = Mailbox()

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            message = message_from_bytes(envelope.content, policy=default)
            mailbox.messages.append({"envelope_to": list(envelope.rcpt_tos), "message": message})
            return "250 OK"

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    settings.MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {"host": "127.0.0.1", "port": port, "timeout": 5},
        }
    }
    yield mailbox
    controller.stop()
