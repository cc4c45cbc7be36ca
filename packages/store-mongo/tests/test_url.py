"""Store URLs: what the store keeps (database, driver, namespace) and what the driver gets."""

from __future__ import annotations

import pytest
from mongo_server import store_url
from tasks_core import InvalidInput, StoreUnavailable, find_store
from tasks_store_mongo._url import parse_url
from tasks_store_mongo.plugin import open_mongo


def test_defaults_are_pymongo_database_tasks_and_no_namespace() -> None:
    """A bare URL MUST mean PyMongo's async client, database ``tasks``, default prefix."""
    parsed = parse_url("mongodb://db.example:27017")
    assert ("pymongo", "tasks", None) == (parsed.driver, parsed.database, parsed.namespace)
    assert "mongodb://db.example:27017/tasks" == parsed.client_url


def test_our_options_are_taken_out_and_driver_options_are_kept() -> None:
    """``driver`` and ``namespace`` MUST be removed before the URL reaches the driver;
    every other option MUST be passed on unchanged."""
    parsed = parse_url(
        "mongodb://u:p@h1,h2:27018/jobs?replicaSet=rs0&driver=motor&namespace=app1&w=majority"
    )
    assert ("motor", "jobs", "app1") == (parsed.driver, parsed.database, parsed.namespace)
    assert "mongodb://u:p@h1,h2:27018/jobs?replicaSet=rs0&w=majority" == parsed.client_url


def test_srv_and_the_mongo_alias_are_accepted() -> None:
    """``mongodb+srv://`` MUST be kept; ``mongo://`` MUST be an alias of ``mongodb://``."""
    assert parse_url("mongodb+srv://cluster.example/x").client_url.startswith("mongodb+srv://")
    assert "mongodb://localhost/tasks" == parse_url("mongo://").client_url


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://localhost/tasks",
        "mongodb://localhost/tasks?driver=mongoengine",
        "mongodb://localhost/bad.name",
        "mongodb://localhost/tasks?namespace=$x",
        "mongodb://localhost/tasks?namespace=",
        "mongodb://localhost/tasks?namespace=system",
        "mongodb://localhost/tasks?namespace=system.x",
        "mongodb://localhost/tasks?namespace=a&namespace=b",
        "mongodb://localhost/tasks?driver=motor&DRIVER=pymongo",
        "localhost:27017",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    """Another scheme, an unknown driver, a bad database or namespace, or one of our
    options given twice (never the last one silently) MUST raise ``InvalidInput`` before
    anything connects."""
    with pytest.raises(InvalidInput):
        parse_url(url)


@pytest.mark.parametrize(("query", "named"), [
    ("serverSelectionTimeoutMS=-1", "'serverSelectionTimeoutMS'"),
    ("connectTimeoutMS=inf", "'connectTimeoutMS'"),
    ("socketTimeoutMS=1e400", "'socketTimeoutMS'"),
    ("maxPoolSize=-1", "'maxPoolSize'"),
    ("serverSelectionTimeout=5000", "'serverSelectionTimeout'"),
    ("tlsInsecure=true&tlsAllowInvalidCertificates=true", "s"),
])
@pytest.mark.parametrize("scheme", ["mongodb", "mongodb+srv"])
def test_a_driver_option_the_driver_refuses_is_refused_here(
    scheme: str, query: str, named: str
) -> None:
    """A driver option the driver would only warn about and drop (a timeout of -1 or
    inf, a pool of -1, a misspelt name, a conflicting pair) MUST be ``InvalidInput``
    naming it — no connection, no DNS lookup — and never quote the URL's password."""
    said = "options" if named == "s" else f"option {named}"
    with pytest.raises(InvalidInput, match=f"MongoDB URL {said} refused by the driver") as refused:
        parse_url(f"{scheme}://user:s3cret-pw@db.example/tasks?{query}")
    assert "s3cret-pw" not in str(refused.value)


@pytest.mark.parametrize(("query", "named"), [
    ("journal=true&fsync=true", "'journal', 'fsync'"),
    ("w=0&journal=true", "'w', 'journal'"),
    ("readConcernLevel=bogus", "'readConcernLevel'"),
])
def test_a_concern_the_driver_or_server_would_refuse_is_refused_naming_its_options(
    query: str, named: str
) -> None:
    """A write concern pymongo cannot build (``j`` with ``fsync``, ``w=0`` with ``j``)
    or a read concern level MongoDB does not have MUST be ``InvalidInput`` naming the
    options — before anything connects, not a bare "Invalid MongoDB URL or option" at
    the client, nor the server's refusal after a collection was created."""
    with pytest.raises(InvalidInput, match=f"MongoDB URL option.* {named} refused"):
        parse_url(f"mongodb://db.example/tasks?{query}")


@pytest.mark.anyio
async def test_unknown_options_are_refused() -> None:
    """An option the store does not know MUST raise ``InvalidInput``."""
    with pytest.raises(InvalidInput, match="poolsize"):
        await open_mongo("mongodb://localhost/tasks", poolsize=3)


@pytest.mark.anyio
@pytest.mark.parametrize("namespace", ["", "system", "system.tasks", "$x"])
async def test_a_namespace_option_is_checked_as_the_urls_is(namespace: str) -> None:
    """``namespace=`` given as an option MUST be refused as in the URL, before anything
    connects: an empty one is never read as the default namespace (another app's
    tasks), and ``system``, whose collections MongoDB reserves, is refused up front."""
    with pytest.raises(InvalidInput, match=r"^namespace "):
        await open_mongo("mongodb://127.0.0.1:1/tasks?serverSelectionTimeoutMS=100",
                         namespace=namespace)


def test_both_schemes_find_the_mongo_plugin() -> None:
    """``mongodb://``, ``mongodb+srv://`` and ``mongo://`` MUST all find this plugin."""
    names = {find_store(u).name for u in ("mongodb://h/x", "mongodb+srv://h/x", "mongo://h")}
    assert {"mongodb"} == names
    assert "tasks-store-mongo" == find_store("mongodb").distribution



@pytest.mark.anyio
async def test_a_failed_dns_lookup_of_an_srv_host_is_unavailable_not_invalid() -> None:
    """A ``mongodb+srv://`` host whose DNS lookup fails (here: a name that cannot exist,
    ``.invalid``) MUST be ``StoreUnavailable`` in plain words — pymongo reports every
    resolver error, timeouts included, as a ``ConfigurationError``, which is not a bad
    option."""
    with pytest.raises(StoreUnavailable, match="DNS lookup"):
        await open_mongo("mongodb+srv://no-such-host.invalid/x")


@pytest.mark.anyio
async def test_a_refused_login_is_unavailable_in_plain_words(
    mongo_base_url: str, driver: str
) -> None:
    """A login the server refuses (an unknown user or a wrong password: code 18) MUST be
    ``StoreUnavailable`` saying "the login was refused", as on the SQL stores, and MUST
    NOT show the password."""
    secret = "s3cret-Pw"
    url = store_url(mongo_base_url.replace("mongodb://", f"mongodb://nobody:{secret}@"),
                    driver)
    with pytest.raises(StoreUnavailable, match="the login was refused") as refused:
        await open_mongo(url)
    assert secret not in str(refused.value)
