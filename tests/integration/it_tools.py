"""Tools for the worker, sweeper, cancel and scale-out tests: steps that wait for a gate.

A gate is a file in $AGENTSITE_IT_GATES; a step waiting on it finishes once the test (any
process) creates it, so a test decides exactly which steps are in flight when it strikes.
"""

import os
import tempfile
import time
from pathlib import Path

from plans.tools import tool

GATE_POLL_S = 0.02


def gates_dir() -> Path:
    return Path(os.environ.get("AGENTSITE_IT_GATES") or Path(tempfile.gettempdir(), "it-gates"))


def gate_open(name: str) -> None:
    gates_dir().mkdir(parents=True, exist_ok=True)
    (gates_dir() / name).touch()


def _wait_for(gate: str) -> None:
    path = gates_dir() / gate
    while not path.exists():
        time.sleep(GATE_POLL_S)


@tool(timeout_s=600)
def hold(label: str, gate: str) -> str:
    """Wait until the gate opens, then return the label."""
    _wait_for(gate)
    return label


@tool(destructive=True, timeout_s=600)
def charge(account: str, amount: int, gate: str, idempotency_key: str) -> dict:
    """Charge an account once per key (the ledger), then wait for the gate before answering."""
    from plans.models import LedgerEntry

    entry, _ = LedgerEntry.objects.get_or_create(
        idempotency_key=idempotency_key,
        defaults={"kind": "it_charge", "details": {"account": account, "amount": amount}},
    )
    _wait_for(gate)
    return {"charged": amount, "entry": entry.pk}


@tool
def pause(seconds: float, label: str) -> str:
    """Sleep, then return the label."""
    time.sleep(seconds)
    return label


@tool
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@tool
def tally(label: str) -> str:
    """Note the call in calls.log beside the gates (outside the database); return the label."""
    gates_dir().mkdir(parents=True, exist_ok=True)
    with (gates_dir() / "calls.log").open("a") as calls:
        calls.write(f"{label}\n")
    return label


def calls_made() -> list[str]:
    """The labels tally was called with, in order, from every process."""
    path = gates_dir() / "calls.log"
    return path.read_text().split() if path.exists() else []


@tool
def sever(spare: int, label: str) -> str:
    """The first time: end every other session on this database but the one of pid `spare`,
    as a server restart would (spare 0 spares none); then note the call, return the label."""
    from django.db import connection

    done = gates_dir() / f"severed-{label}"
    if done.exists():
        tally(label)
        return label
    gates_dir().mkdir(parents=True, exist_ok=True)
    done.touch()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND backend_type = 'client backend' "
            "AND pid <> pg_backend_pid() AND pid <> %s",
            [spare],
        )
    tally(label)
    return label


@tool
def open_gate(name: str) -> str:
    """Open the gate (a step's way to tell the test it got this far); return its name."""
    gate_open(name)
    return name
