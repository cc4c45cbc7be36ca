"""CPU time per task of a burn-down: this process's own (``getrusage``) and the rest of the
machine's (``/proc/stat`` less this process — with the database on the machine, mostly the
database). Rates drift with the load of a shared machine by ±20 % between runs; CPU time
per task moves much less, so it is what tells whether a change made the work cheaper.
``rest`` is ``None`` where ``/proc/stat`` does not exist.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Sample", "per_task", "sample"]

_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class Sample:
    """CPU seconds so far: of this process, and of the whole machine (busy time)."""

    process: float
    machine: float | None


def sample() -> Sample:
    """The CPU seconds spent so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return Sample(usage.ru_utime + usage.ru_stime, _machine_busy())


def per_task(before: Sample, after: Sample, tasks: int) -> dict[str, float | None]:
    """Microseconds per task between two samples: ``worker`` (this process) and ``rest``."""
    worker = after.process - before.process
    rest = None
    if before.machine is not None and after.machine is not None:
        rest = max(0.0, after.machine - before.machine - worker)
    return {
        "worker_us": round(worker / tasks * 1e6, 1),
        "rest_us": None if rest is None else round(rest / tasks * 1e6, 1),
    }


def _machine_busy() -> float | None:
    """Busy CPU seconds of all cores (user, nice, system, irq, softirq) since boot."""
    try:
        fields = _STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
