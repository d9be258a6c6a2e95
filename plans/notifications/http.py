"""POSTing a webhook: to a vetted address only, no redirects followed, bounded in time."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings


class UrlRefused(ValueError):
    """A webhook URL that may not be called; the message says why."""


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    latency_ms: int
    error: str = ""

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def url_check(url: str) -> None:
    """Refuse what is no http(s) URL; the address is checked again at every send."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"}:
        raise UrlRefused("Webhook URLs must start with http:// or https://.")
    if not parts.hostname:
        raise UrlRefused("The webhook URL has no host.")
    if parts.username or parts.password:
        raise UrlRefused("Put no credentials in the URL: the secret signs each delivery.")
    _addresses(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))


def _addresses(host: str, port: int) -> list[str]:
    """The host's addresses, all public unless AGENTSITE_WEBHOOK_ALLOW_PRIVATE (SSRF)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise UrlRefused(f"The host {host!r} cannot be resolved: {error}.") from error
    addresses = sorted({str(info[4][0]) for info in infos})
    if not settings.AGENTSITE_WEBHOOK_ALLOW_PRIVATE:
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            if not ip.is_global or ip.is_multicast:
                raise UrlRefused(
                    f"{host} resolves to {address}, a loopback, private or reserved address; "
                    "webhooks may not call those (AGENTSITE_WEBHOOK_ALLOW_PRIVATE allows it)."
                )
    return addresses


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the address that was vetted, not to whatever the name resolves to later."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def post(url: str, body: bytes, headers: dict[str, str], *, timeout: float) -> Outcome:
    """One POST; any answer but a 2xx (a redirect too: it is not followed) is a failure."""
    started = time.monotonic()

    def outcome(status: int | None, error: str = "") -> Outcome:
        return Outcome(status, round((time.monotonic() - started) * 1000), error)

    parts = urlsplit(url)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    try:
        address = _addresses(parts.hostname or "", port)[0]
    except UrlRefused as refused:
        return outcome(None, str(refused))
    connection_class = _PinnedHTTPSConnection if https else _PinnedHTTPConnection
    connection = connection_class(parts.hostname or "", port, address, timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(
            "POST",
            path,
            body=body,
            headers={
                **headers,
                "Content-Type": "application/json",
                "User-Agent": "agentsite-webhooks/1",
            },
        )
        response = connection.getresponse()
        response.read(64 * 1024)  # enough to reuse nothing, but not to hang on a huge body
        status = response.status
    except TimeoutError:
        return outcome(None, f"no answer within {timeout:g} s")
    except (OSError, http.client.HTTPException) as error:
        return outcome(None, f"{type(error).__name__}: {error}")
    finally:
        connection.close()
    if 300 <= status < 400:
        return outcome(status, f"HTTP {status}: redirects are not followed")
    if not 200 <= status < 300:
        return outcome(status, f"HTTP {status}")
    return outcome(status)
