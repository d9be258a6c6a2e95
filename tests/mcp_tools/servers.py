"""Real MCP servers for the tests: mcp-server-time (PyPI) runs from this interpreter over stdio."""

import contextlib
import os
import signal
import sys

TIME_SERVER = {
    "command": sys.executable,
    "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
}


def child_pids() -> list[int]:
    """This process's child processes (the stdio servers it started)."""
    me, children = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            children.append(int(entry))
    return children


def kill_children() -> list[int]:
    killed = child_pids()
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    for pid in killed:
        with contextlib.suppress(ChildProcessError):  # reaped by the SDK's own wait
            os.waitpid(pid, 0)
    return killed
