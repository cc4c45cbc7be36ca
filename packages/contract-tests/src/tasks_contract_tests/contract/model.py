"""The store agrees with the reference model (Hypothesis).

:class:`ModelContract` runs :func:`tasks_contract_tests.state_machine.run_model_check`:
random programs run on your store and on the reference ``MemoryStore`` side by side; after
every step both must agree exactly (run ids and lease tokens excepted). The machine runs
on its own event loop in a worker thread, so your ``store_factory`` must create stores
usable from another event loop.
"""

from __future__ import annotations

import functools

import anyio.to_thread

from tasks_contract_tests._base import ContractBase, StoreFactory
from tasks_contract_tests.state_machine import run_model_check


class ModelContract(ContractBase):
    """The store agrees with the reference model (Hypothesis).

    The programs are random creates, claims, transitions (under exact, stale and forged
    leases and every kind of request access), renewals, releases, progress, clock moves,
    reaps and deletes.

    The machine owns its own event loop and runs in a worker thread, so **your
    ``store_factory`` must create stores usable from another event loop**: open
    connections, pools and engines inside the factory call (not in the fixture) and close
    them in ``aclose()``. A factory that hands out a client bound to the test's loop fails
    here first.

    Cost: ``model_examples`` programs of up to ``model_steps`` steps. The defaults keep it
    to a few seconds on the memory store; raise them in your subclass for a deeper
    search::

        class TestAcmeStore(StoreContract):
            model_examples = 200
            model_steps = 40
    """

    model_examples: int = 20
    """How many random programs ``test_store_agrees_with_the_reference_model`` runs."""
    model_steps: int = 25
    """The most steps of one program."""
    model_seed: int | None = 0
    """The Hypothesis seed (``None``: a new random seed per run)."""
    model_shrink_seconds: float | None = 30.0
    """Wall seconds spent shrinking a failing program (``None``: Hypothesis's caps)."""

    async def test_store_agrees_with_the_reference_model(
        self, store_factory: StoreFactory
    ) -> None:
        """Driven by random programs of every store operation, the store MUST give the
        same results and errors as the reference ``MemoryStore`` on the same clock, step by
        step: same snapshots (every field but ``run_id``), same leases (but tokens), same
        histories and listings; its revisions MUST never decrease, a terminal task MUST
        stay terminal, and at most one lease per task may be live.

        Troubleshooting: the failure names the broken rule (``broken rule: …``), the
        step and each differing field (``store=… reference=…``), and Hypothesis notes the
        shortest program it found within the shrink budget (``model_shrink_seconds``;
        past it, the first failing program): replay those steps in a plain test. Most
        disagreements are a rule applied outside the atomic step or a field derived from
        the wall clock instead of the store clock.
        If the failure is an error about event loops, see the class docstring: the factory
        is called from a worker thread on a fresh loop. Fix the targeted contract tests
        first; this test finds what they missed.
        """
        run = functools.partial(
            run_model_check,
            store_factory,
            max_examples=self.model_examples,
            steps=self.model_steps,
            seed_value=self.model_seed,
            shrink_seconds=self.model_shrink_seconds,
        )
        await anyio.to_thread.run_sync(run)
