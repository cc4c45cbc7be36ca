"""``app.sync`` across ``os.fork()`` (gunicorn ``--preload``, a multiprocessing pool): a
child of a process that used the facade has neither its loop thread nor a right to its
store connections, so it opens its own on first use, and the parent's go on working."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tasks_store_sql.plugin import drop_namespace

pytestmark = pytest.mark.anyio

PROGRAM = textwrap.dedent("""
    import os, signal, sys
    from tasks_core import App, Owner

    app = App(sys.argv[1], store_options={"namespace": "forked"})

    @app.task
    def job(ctx, n: int) -> int:
        return n

    alice = Owner("alice")
    app.sync.submit(job, {"n": 0}, alice, key="before")
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a hang ends the child (exit by SIGALRM), never the test
        made = app.sync.submit(job, {"n": 1}, alice, key="child")
        seen = app.sync.get("alice::before", alice)
        app.sync.close()
        os._exit(0 if (made.outcome, seen.id) == ("created", "alice::before") else 3)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    again = app.sync.submit(job, {"n": 2}, alice, key="after")  # the parent's connections
    print("parent", again.outcome, app.sync.get("alice::child", alice).id)
    app.sync.close()
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
async def test_a_forked_child_uses_app_sync_on_its_own_store_connections(
    db_url: str, tmp_path: Path
) -> None:
    """After the parent used ``app.sync``, a forked child's first call MUST open its own
    loop and store and succeed (it hung: the loop's thread stays in the parent), and the
    parent MUST go on using its own connections afterwards (the child never closes
    them)."""
    await drop_namespace(db_url, "forked")
    try:
        proc = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", PROGRAM, db_url], capture_output=True,
            text=True, timeout=120, cwd=tmp_path)
    finally:
        await drop_namespace(db_url, "forked")
    assert 0 == proc.returncode, proc.stderr
    assert ["child 0", "parent created alice::child"] == proc.stdout.splitlines()
