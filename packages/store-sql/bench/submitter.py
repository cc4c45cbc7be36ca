"""The ``other process`` submitter of the latency measurement (run by ``bench.py``).

    python submitter.py URL NAMESPACE RATE SAMPLES

Opens its own store (``NAMESPACE`` empty: none), submits ``SAMPLES`` ``stamp`` tasks at
``RATE`` per second, and prints ``{"submitted": {seq: seconds}}`` on one line: when each
submit was called, on the system-wide monotonic clock the worker stamps starts with.
"""

from __future__ import annotations

import asyncio
import json
import sys

from bench import OWNER, Probe, make_app, steady
from tasks_store_sql import SQLStore


async def main(url: str, namespace: str, rate: float, samples: int) -> None:
    store = await SQLStore.open(url, namespace=namespace or None)
    try:
        app = make_app(store, Probe())

        async def submit(seq: int) -> None:
            await app.submit("stamp", {"seq": seq}, OWNER)

        submitted = await steady(submit, rate, samples)
    finally:
        await store.aclose()
    print(json.dumps({"submitted": submitted}))


if __name__ == "__main__":
    url, namespace, rate, samples = sys.argv[1:5]
    asyncio.run(main(url, namespace, float(rate), int(samples)))
