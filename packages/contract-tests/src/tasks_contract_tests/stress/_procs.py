"""Real OS processes for a run: spawned, spoken to over stdin/stdout, signalled, and
always reaped.

Each child runs ``python -m <module>`` with the store URL and options and a ledger file of
its own in the run directory; its stderr goes to a log file next to it (kept for
post-mortems). :class:`Fleet` is an async context manager: whatever happens inside, on
exit every child that is still alive is continued (if stopped), killed and waited for.
The fleet counts what the harness did to its children (kills, stops, terms) for the
report; a child's pid is remembered as *killed* when the harness SIGKILLed it, which is
what allows that child's runs to end without an ``end`` row.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from types import TracebackType

from tasks_contract_tests.stress._ledger import SUFFIX, Entry, read_ledger
from tasks_contract_tests.stress._target import HarnessError, Target

__all__ = ["Child", "Fleet"]

PACKAGE = "tasks_contract_tests.stress"


class Child:
    """One child process of the fleet."""

    def __init__(self, name: str, role: str, proc: asyncio.subprocess.Process,
                 ledger: Path, log: Path) -> None:
        self.name = name
        self.role = role
        self.proc = proc
        self.ledger = ledger
        self.log = log

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """Whether the process has not been reaped yet."""
        return self.proc.returncode is None

    async def expect(self, word: str, timeout: float) -> None:
        """Read stdout lines until one is ``word``.

        Raises:
            HarnessError: the process ended or ``timeout`` passed first.
        """
        assert self.proc.stdout is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    line = await self.proc.stdout.readline()
                    if not line:
                        raise HarnessError(f"{self.name} ended before saying {word!r} "
                                           f"(see {self.log})")
                    if line.decode().strip() == word:
                        return
        except TimeoutError:
            raise HarnessError(f"{self.name} did not say {word!r} within {timeout:g}s "
                               f"(see {self.log})") from None

    async def tell(self, line: str) -> None:
        """Write one line to the child's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def wait(self, timeout: float) -> int | None:
        """Wait for the exit code; ``None`` if still running after ``timeout``."""
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            return None

    def entries(self) -> list[Entry]:
        """What the child has written to its ledger so far."""
        return read_ledger(self.ledger)


class Fleet:
    """The children of one workload or scenario; see the module docstring.

    Args:
        directory: where ledgers and logs go.
        target: the store every child opens.
    """

    def __init__(self, directory: Path, target: Target) -> None:
        self.directory = directory
        self.target = target
        self.children: list[Child] = []
        self.killed: set[int] = set()
        self.signals: Counter[str] = Counter()
        self._numbers: Counter[str] = Counter()

    async def __aenter__(self) -> Fleet:
        self.directory.mkdir(parents=True, exist_ok=True)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.reap()

    async def spawn(self, role: str, *args: str, module: str | None = None,
                    ready: float | None = 60.0) -> Child:
        """Start ``python -m <module> --store … --options … --ledger … *args``.

        Args:
            role: ``worker``, ``client``, ``writer``… (names the module by default).
            args: further arguments.
            module: the module to run (default ``tasks_contract_tests.stress._<role>``).
            ready: wait this long for the child's ``ready`` line (``None``: do not wait).

        Raises:
            HarnessError: the child did not get ready.
        """
        self._numbers[role] += 1
        name = f"{role}-{self._numbers[role]}"
        ledger = self.directory / f"{name}{SUFFIX}"
        log = self.directory / f"{name}.log"
        command = [sys.executable, "-m", module or f"{PACKAGE}._{role}",
                   "--store", self.target.url, "--options", self.target.options_json,
                   "--ledger", str(ledger), *args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with log.open("ab") as stderr:
            proc = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=stderr, env=env,
            )
        child = Child(name, role, proc, ledger, log)
        self.children.append(child)
        if ready is not None:
            await child.expect("ready", ready)
        return child

    def signal(self, child: Child, signum: signal.Signals) -> None:
        """Send ``signum`` to ``child`` and count it (SIGKILL marks it killed)."""
        if not child.alive:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)
        self.signals[signum.name] += 1
        if signum == signal.SIGKILL:
            self.killed.add(child.pid)

    async def kill(self, child: Child) -> None:
        """SIGKILL ``child`` and reap it."""
        self.signal(child, signal.SIGKILL)
        await child.wait(30)

    async def stop_all(self, role: str, timeout: float) -> dict[str, int | None]:
        """SIGTERM every live child of ``role`` (a drain) and wait for their exit codes."""
        chosen = [c for c in self.children if c.role == role and c.alive]
        for child in chosen:
            self.signal(child, signal.SIGTERM)
        codes = await asyncio.gather(*(c.wait(timeout) for c in chosen))
        return {c.name: code for c, code in zip(chosen, codes, strict=True)}

    async def reap(self) -> None:
        """Continue, kill and wait for every child still alive (never raises)."""
        for child in self.children:
            if child.alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGCONT)
                    os.kill(child.pid, signal.SIGKILL)
        for child in self.children:
            with contextlib.suppress(Exception):
                await child.wait(30)
            for stream in (child.proc.stdin,):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()

    @property
    def processes(self) -> int:
        """How many processes were started."""
        return len(self.children)

    def pids(self, role: str | None = None) -> list[int]:
        """Pids of the children (of ``role``)."""
        return [c.pid for c in self.children if role is None or c.role == role]
