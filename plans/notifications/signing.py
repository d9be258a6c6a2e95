"""Webhook signatures: HMAC-SHA256 over "<timestamp>.<body>" with the endpoint's secret.

A receiver verifies a delivery like this (reject if the timestamp is more than 5 minutes old):

    import hashlib, hmac, time

    def verify(secret: str, headers, body: bytes) -> bool:
        timestamp = headers["X-Agentsite-Timestamp"]
        signed = timestamp.encode() + b"." + body
        expected = "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        fresh = abs(time.time() - int(timestamp)) < 300
        return fresh and hmac.compare_digest(expected, headers["X-Agentsite-Signature"])
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Agentsite-Signature"
TIMESTAMP_HEADER = "X-Agentsite-Timestamp"
EVENT_HEADER = "X-Agentsite-Event"
DELIVERY_HEADER = "X-Agentsite-Delivery"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_valid(secret: str, timestamp: str, body: bytes, given: str) -> bool:
    if not timestamp.isdecimal():
        return False
    return hmac.compare_digest(signature(secret, int(timestamp), body), given)
