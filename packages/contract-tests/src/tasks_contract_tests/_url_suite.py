"""The contract suite against ``--tasks-store-url``: one fresh namespace per test."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tasks_core import (
    InvalidInput,
    SchemaMismatch,
    StoreSpec,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
    TaskStore,
    UnknownStore,
    find_store,
)
from tasks_core.plugins import BeginTransaction
from tasks_core.storekit import QueueLimits

from tasks_contract_tests import StoreContract
from tasks_contract_tests._base import Corrupter, StoreFactory
from tasks_contract_tests._kit import new_task
from tasks_contract_tests._process_race import race_processes

RACING_PROCESSES = 4


class TestStoreAtURL(StoreContract):
    """Every contract test against the store the URL names."""

    @pytest.fixture
    def store_url(self, request: pytest.FixtureRequest) -> str:
        url = request.config.getoption("--tasks-store-url")
        if not url:
            pytest.skip("no --tasks-store-url given")
        return str(url)

    @pytest.fixture
    def store_spec(self, store_url: str) -> StoreSpec:
        return find_store(store_url)

    @pytest.fixture
    def namespaces(self) -> list[str]:
        """The namespaces the test's stores live in, newest last."""
        return []

    @pytest.fixture
    async def store_factory(
        self, store_url: str, store_spec: StoreSpec, namespaces: list[str]
    ) -> AsyncIterator[StoreFactory]:
        async def factory(**options: Any) -> TaskStore:
            namespace = "t" + secrets.token_hex(5)
            if store_spec.create_namespace is not None:
                await store_spec.create_namespace(store_url, namespace)
            namespaces.append(namespace)
            return await store_spec.factory(store_url, namespace=namespace, **options)

        yield factory
        if store_spec.drop_namespace is not None:
            for namespace in namespaces:
                await store_spec.drop_namespace(store_url, namespace)

    @pytest.fixture
    def corrupt_task(self, store_spec: StoreSpec) -> Corrupter | None:
        return store_spec.corrupt

    @pytest.fixture
    def begin_transaction(self, store_spec: StoreSpec) -> BeginTransaction | None:
        return store_spec.begin_transaction

    async def test_the_plugin_declares_every_capability_its_store_has(
        self, store: TaskStore, store_spec: StoreSpec
    ) -> None:
        """Every flag the store reports MUST be on in its plugin's ``StoreSpec``: the spec
        declares the most a URL of the plugin can get (``tasks backends``, the stress
        harness and callers choosing a store read it), the store what this URL has —
        it may have less (MariaDB has no wakeups), never more.

        Troubleshooting: declare the spec's ``capabilities`` as the union of what the
        plugin's stores can offer, and each store's as what it offers here.
        """
        spec = store_spec.capabilities.model_dump()
        beyond = sorted(k for k, on in store.capabilities.model_dump().items()
                        if on and not spec[k])
        assert [] == beyond, f"the store has {beyond}, which its spec does not declare"

    async def test_create_false_opens_only_a_store_that_exists(
        self, store_url: str, store_spec: StoreSpec, namespaces: list[str]
    ) -> None:
        """Opened with ``create=False`` (what every read command of the CLI asks), a store
        MUST create nothing: in a namespace nobody made it is refused with
        ``UnknownStore`` or ``SchemaMismatch`` — and refused again, so the first try wrote
        nothing — while a namespace holding a store opens and reads its tasks. A
        ``create`` that is not a bool MUST be ``InvalidInput``. (A plugin whose every open
        is a fresh store, without ``create_namespace``, only takes the option: its reopened
        namespace MUST NOT hold the task.)

        Troubleshooting: read ``create`` with ``tasks_core.plugins.check_create``; with
        ``False`` check for the store's tables, collections or file and raise before any
        DDL or connect that would make them. A store that keeps its tasks between opens
        MUST set ``StoreSpec.create_namespace`` and ``drop_namespace``, so that this test
        can prove that ``create=False`` refuses a namespace nobody made.
        """
        with pytest.raises(InvalidInput):
            await store_spec.factory(store_url, create="no")
        namespace = "t" + secrets.token_hex(5)
        namespaces.append(namespace)  # dropped afterwards, whatever happens here
        if store_spec.create_namespace is not None:
            for _ in range(2):
                with pytest.raises((UnknownStore, SchemaMismatch)):
                    await store_spec.factory(store_url, namespace=namespace, create=False)
            await store_spec.create_namespace(store_url, namespace)
        made = await store_spec.factory(store_url, namespace=namespace)
        created = await made.create(new_task())
        await made.aclose()
        opened = await store_spec.factory(store_url, namespace=namespace, create=False)
        try:
            if store_spec.create_namespace is not None:
                assert created.id == (await opened.get(created.id, tenant=None)).id
            else:  # every open fresh: a store that kept the task needs the hooks
                with pytest.raises(TaskNotFound):
                    await opened.get(created.id, tenant=None)
        finally:
            await opened.aclose()

    async def test_the_factory_takes_the_standard_options_and_refuses_others(
        self, store_url: str, store_spec: StoreSpec, namespaces: list[str]
    ) -> None:
        """The factory MUST take every standard option as an ``App`` passes it — both
        limits ``None`` (off) beside ``namespace`` and ``create`` — and MUST refuse an
        option it does not know with ``InvalidInput``, never drop it.

        Troubleshooting: read the limits as ``StoreLimits`` does (``None``: off); compare
        the options given with the set the factory knows before opening anything.
        """
        with pytest.raises(InvalidInput):
            await store_spec.factory(store_url, colour="blue")
        namespace = "t" + secrets.token_hex(5)
        namespaces.append(namespace)  # dropped afterwards, whatever happens here
        store = await store_spec.factory(store_url, namespace=namespace, create=True,
                                         max_tasks=None, max_active_tasks_per_scope=None)
        try:
            created = await store.create(new_task())
            assert created.id == (await store.get(created.id, tenant=None)).id
        finally:
            await store.aclose()

    @pytest.mark.parametrize("kind", ["max_running", "rate"])
    async def test_racing_processes_never_pass_the_queue_limits(
        self, store_factory: StoreFactory, store_url: str, namespaces: list[str], kind: str
    ) -> None:
        """Claimers in separate processes, each on its own connection, released together
        on a queue with ``max_running=3`` (or ``rate=(3, 600)``) MUST claim 3 tasks
        between them — never more — where the store is shared by processes.

        Troubleshooting: the count and the claim are one atomic step in the database
        (a lock row per limited queue, a transaction writing the queue's document), not a
        lock of one process.
        """
        store = await store_factory()  # the system clock: the racers know no other
        if not (store.capabilities.queue_limits and store.capabilities.multi_process):
            pytest.skip("the store has no queue_limits, or is not shared by processes")
        for _ in range(2 * RACING_PROCESSES):
            await store.create(new_task(queue="limited"))
        limits = (QueueLimits(max_running=3) if kind == "max_running"
                  else QueueLimits(rate=(3, 600)))
        results = await asyncio.to_thread(race_processes, store_url, namespaces[-1], limits,
                                          RACING_PROCESSES)
        assert [] == [r for r in results if not isinstance(r, int)], results
        assert 3 == sum(results)
        live = await store.list(TaskQuery(tenant=None, queue="limited", statuses=frozenset(
            {TaskStatus.RUNNING, TaskStatus.CLAIMED})))
        await store.aclose()
        assert 3 == len(live)
