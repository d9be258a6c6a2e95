"""Real MCP servers for the tests: mcp-server-time (PyPI) runs from this interpreter over stdio."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.servers import free_port

# The official reference servers: the tests trust their annotations (readOnlyHint), as an
# operator who has vetted them would; tests/mcp_tools/hostile_server.py is the one not trusted.
TIME_SERVER = {
    "command": sys.executable,
    "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
    "trust_annotations": True,
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


NODE_MODULES = Path(__file__).resolve().parents[1] / "node" / "node_modules"
EVERYTHING_JS = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
EVERYTHING_STDIO = {
    "command": shutil.which("node") or "node",
    "args": [str(EVERYTHING_JS), "stdio"],
    "trust_annotations": True,
}


def everything_installed() -> bool:
    return EVERYTHING_JS.exists() and shutil.which("node") is not None


@contextlib.contextmanager
def everything_over_http() -> Iterator[str]:
    """server-everything serving streamable HTTP on a free port; yields its /mcp URL."""
    port = free_port()
    process = subprocess.Popen(  # noqa: S603 - Debian's node running the npm package
        [shutil.which("node") or "node", str(EVERYTHING_JS), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:  # blocks until the server says it listens (or exits)
            if f"listening on port {port}" in line:
                break
        else:
            raise RuntimeError(f"server-everything exited with {process.wait()}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


# Our own hostile server (tests/mcp_tools/hostile_server.py) on the official SDK, over stdio.
HOSTILE_SERVER = {
    "command": sys.executable,
    "args": [str(Path(__file__).with_name("hostile_server.py"))],
}


# A stdio server that does not answer until the test opens its FIFO for writing, then becomes
# mcp-server-time (the initialize message waits in its stdin meanwhile): a server "starting"
# for exactly as long as the test wants, with no clock involved.
_HOLD_THEN_TIME = (
    "import os, sys\n"
    "with open(sys.argv[1]) as fifo: fifo.read()\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'mcp_server_time', '--local-timezone', 'UTC'])"
)


@contextlib.contextmanager
def held_time_server(directory: Path) -> Iterator[tuple[dict, Callable[..., None]]]:
    """The held server's settings and a release(); released at the end in any case."""
    fifo = directory / "release"
    os.mkfifo(fifo)
    released = []

    def release(*, wait: bool = True) -> None:
        if released:
            return
        if wait:  # blocks until the server opens its end (it is being started)
            writer = os.open(fifo, os.O_WRONLY)
        else:  # at the end: a server that never started has no end to open
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return
        released.append(True)
        os.write(writer, b"go")
        os.close(writer)

    config = {
        "command": sys.executable,
        "args": ["-c", _HOLD_THEN_TIME, str(fifo)],
        "trust_annotations": True,
    }
    try:
        yield config, release
    finally:
        release(wait=False)
