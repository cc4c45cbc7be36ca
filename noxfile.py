"""Every check of the repository. `nox` runs the sessions that need no server; `nox -l` lists all.

One table of packages and one of stores drive every session below: adding a package or a
store is one line here. Sessions install the workspace from freshly built wheels (never
editable), so they test what users install.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import nox

ROOT = Path(__file__).parent


@dataclass(frozen=True)
class Package:
    """A distribution of the repository: where it lives, and what its tests install."""

    path: str
    module: str
    needs: tuple[str, ...]  # what its tests install besides "<itself>[test]"


def reachable(url: str) -> bool:
    """Whether the server of ``url`` accepts TCP connections (the default probe)."""
    parts = urlsplit(url)
    port = parts.port or DEFAULT_PORTS.get(parts.scheme.split("+")[0], 0)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=2):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def secantusdb(session: nox.Session, storage: str = ":memory:", *,
               required: bool = True, standalone: bool = False) -> Iterator[str]:
    """Start SecantusDB (the test-only MongoDB wire-protocol server) on a free port, its
    data in ``storage`` (a one-node replica set; ``standalone``: a standalone server); one
    that cannot start fails the session, or (not ``required``) yields "" with a warning."""
    try:
        session.install("secantusdb==0.7.0b3")
    except nox.command.CommandFailed:
        if required:
            raise
        session.warn("SecantusDB could not be installed")
        yield ""
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [str(Path(session.bin) / "secantusd-py"), "--host", "127.0.0.1", "--port", str(port),
            "--storage-path", storage, "--log-level", "WARNING",
            *(["--standalone"] if standalone else [])]
    server = subprocess.Popen(args)
    try:
        deadline = time.monotonic() + 60
        while not reachable(f"mongodb://127.0.0.1:{port}"):
            if server.poll() is not None or time.monotonic() > deadline:
                if required:
                    session.error("SecantusDB did not start")
                session.warn("SecantusDB did not start")
                yield ""
                return
            time.sleep(0.2)
        yield f"mongodb://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


@dataclass(frozen=True)
class Store:
    """A store the contract suite runs against, by URL (``TASKS_<NAME>_URL`` overrides)."""

    url: str  # "{tmp}": the session's temporary directory; "{server}": what `serve` started
    targets: tuple[str, ...]  # packages to install ("name" or "name[extra]")
    server: bool = False  # needs a running database server
    probe: Callable[[str], bool] = reachable  # asked before running when `server`
    serve: Callable[[nox.Session], contextlib.AbstractContextManager[str]] | None = None


SUITE = ("core", "store-memory", "contract-tests")

# fmt: off
PACKAGES = {
    "core": Package("packages/core", "tasks_core", ("store-memory", "store-sql",
                                                    "contract-tests")),
    "store-memory": Package("packages/store-memory", "tasks_store_memory", SUITE),
    "store-sql": Package("packages/store-sql", "tasks_store_sql", SUITE),
    "store-mongo": Package("packages/store-mongo", "tasks_store_mongo", SUITE),
    "contract-tests": Package("packages/contract-tests", "tasks_contract_tests",
                              (*SUITE, "store-sql")),
    "dashboard": Package("packages/dashboard", "tasks_dashboard", (*SUITE, "store-sql")),
}
EXAMPLES = {
    "acme": Package("examples/acme-store", "tasks_store_acme", SUITE),
}
SQL, MONGO = (*SUITE, "store-sql[mysql]"), (*SUITE, "store-mongo[motor]")
STORES = {
    "memory":        Store("memory://", SUITE),
    "sqlite":        Store("sqlite:///{tmp}/contract.db", SQL),
    "postgresql":    Store("postgresql://postgres@127.0.0.1:5432/tasks_test", SQL, server=True),
    # the common (SQLAlchemy) path on PostgreSQL; no LISTEN on psycopg, so no wakeups
    "postgresql-psycopg": Store("postgresql+psycopg://postgres@127.0.0.1:5432/tasks_test",
                                (*SUITE, "store-sql[psycopg]"), server=True),
    "mariadb":       Store("mysql://root@127.0.0.1:3306/tasks_test", SQL, server=True),
    "mariadb-aiomysql": Store("mysql+aiomysql://root@127.0.0.1:3306/tasks_test",
                              (*SUITE, "store-sql[aiomysql]"), server=True),
    "mongodb":       Store("{server}/tasks_test?driver=pymongo", MONGO, serve=secantusdb),
    "mongodb-motor": Store("{server}/tasks_test?driver=motor", MONGO, serve=secantusdb),
    # no transactions, no change streams: the limits by single-document conditional updates
    "mongodb-standalone": Store("{server}/tasks_test?driver=pymongo", MONGO,
                                serve=functools.partial(secantusdb, standalone=True)),
}
# fmt: on
SMALL_BACKLOG = frozenset({"postgresql-psycopg", "mariadb-aiomysql", "mongodb", "mongodb-motor",
                           "mongodb-standalone"})
"""Contract sessions whose default-limits test queues 10,001 tasks (one past the old
per-tenant default; ``TASKS_CONTRACT_BACKLOG``) instead of 100,000: a second driver of a
store another session proves at 100,000, or the MongoDB test server (a few hundred
documents a second: 100,000 took over 7 minutes, proven by hand, see docs/contract.md)."""
RELIABILITY = ("sqlite", "postgresql", "mariadb", "mongodb")  # stores shared by processes
REPORTS = ROOT / "build" / "reliability"  # JSON reports of `nox -s stress chaos`
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mongodb": 27017}
TEST_DEPS = ("pytest>=8", "anyio>=4.4", "hypothesis>=6.100")
RUFF = "ruff==0.17.6"
MYPY = "mypy>=1.11"

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "uv|virtualenv"  # uv (`nox[uv]`) when installed
# `nox`: what needs no database server. `nox -t all` (the README's test command, run by
# .ci/run): every session; a server session skips locally when its server is down and
# fails under CI.
nox.options.sessions = [
    "lint",
    "typecheck",
    "tests(core)",
    "tests(store-memory)",
    "tests(contract-tests)",
    "tests(store-mongo)",
    "tests(dashboard)",
    *(f"contract({name})" for name, store in STORES.items() if not store.server),
    "acme",
    "mutants-sample",
]


def install(session: nox.Session, *targets: str) -> None:
    """Build wheels of ``targets`` (workspace packages or examples) and install them,
    non-editable, with their dependencies and the test tools."""
    known = {**PACKAGES, **EXAMPLES}
    wheels = Path(session.create_tmp()) / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    session.install("pip", "hatchling>=1.25", *TEST_DEPS)  # pip builds (a uv venv has none)
    chosen: dict[str, str] = {}  # one target per package; "name[extra]" wins over "name"
    for target in targets:
        name = target.partition("[")[0]
        if name not in chosen or "[" in target:
            chosen[name] = target
    build = ["python", "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    session.run(*build, "--wheel-dir", str(wheels), *(str(ROOT / known[name].path)
                                                      for name in chosen))  # one pip run
    requirements, built = [], []
    for target in chosen.values():
        name, bracket, extra = target.partition("[")
        wheel = str(next(wheels.glob(f"{known[name].module}-*.whl")))  # the dist's name
        built.append(wheel)
        requirements.append(wheel + bracket + extra)
    session.install(*requirements)
    # A reused venv may hold an older build of the same version: replace it.
    session.install("--no-deps", "--force-reinstall", *built)
    for name in chosen:  # and prove that the wheel, not the source tree, gets imported
        module = known[name].module
        check = f"import {module} as m, sys; sys.exit('site-packages' not in m.__file__)"
        session.run("python", "-c", check, silent=True)


def unavailable(session: nox.Session, message: str) -> None:
    """Skip locally; fail under CI (``CI`` set), where a missing server is a broken setup."""
    if os.environ.get("CI"):
        session.error(f"{message} (CI is set: a database that cannot be reached is a failure)")
    session.skip(message)


@nox.session(tags=["all"])
def lint(session: nox.Session) -> None:
    """Lint every package, the example and this file with ruff (`ruff check`)."""
    session.install(RUFF)
    # `ruff format --check` is left out until every file in the tree is formatted.
    session.run("ruff", "check", "packages", "examples", "noxfile.py", *session.posargs)


@nox.session(tags=["all"])
def typecheck(session: nox.Session) -> None:
    """Type-check each package's and the example's `src/`, the mutation run's script, and
    calls a typed application makes (`typed_user_calls.py`: what it must refuse is marked
    by ignores strict mypy reports once unneeded), with strict mypy."""
    optional = {"core": "core[prometheus]", "store-sql": "store-sql[mysql]",
                "store-mongo": "store-mongo[motor]"}  # telemetry: the OpenTelemetry types
    install(session, *(optional.get(name, name) for name in PACKAGES),
            *(f"{name}[test]" for name in EXAMPLES))
    session.install(MYPY, MUTMUT)  # (mutmut: the mutation script's imports)
    for package in (*PACKAGES.values(), *EXAMPLES.values()):
        session.run("mypy", f"{package.path}/src", *session.posargs)
    session.run("mypy", str(MUTANTS / "mutants.py"), *session.posargs)
    session.run("mypy", "packages/core/tests/typed_user_calls.py", *session.posargs)


@nox.session(tags=["all"])
@nox.parametrize("package", list(PACKAGES), ids=list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """Run one package's `tests/` against its built wheels (no tests collected fails)."""
    install(session, *PACKAGES[package].needs, f"{package}[test]")
    # pytest exits 5 when it collects nothing; nox fails on every exit code but 0.
    session.run("pytest", f"{PACKAGES[package].path}/tests", *session.posargs)


@nox.session(tags=["all"])
@nox.parametrize("store", list(STORES), ids=list(STORES))
def contract(session: nox.Session, store: str) -> None:
    """Run the contract suite by URL (`python -m tasks_contract_tests --store-url URL`)."""
    spec = STORES[store]
    url = os.environ.get(f"TASKS_{store.upper().replace('-', '_')}_URL", spec.url)
    url = url.replace("{tmp}", session.create_tmp())
    if spec.server and not spec.probe(url):
        hint = f"start it or set TASKS_{store.upper().replace('-', '_')}_URL"
        unavailable(session, f"{store}: no server answers at {url}; {hint}")
    install(session, *spec.targets)
    with spec.serve(session) if spec.serve else contextlib.nullcontext("") as server:
        url = url.replace("{server}", server)
        env = {"TASKS_CONTRACT_BACKLOG": "10001"} if store in SMALL_BACKLOG else {}
        session.run("python", "-m", "tasks_contract_tests", "--store-url", url,
                    *session.posargs, env=env)


@nox.session(tags=["all"])
def acme(session: nox.Session) -> None:
    """The example third-party store: its own tests, then the suite by URL (`acme://`)."""
    example = EXAMPLES["acme"]
    install(session, *example.needs, "acme[test]")
    session.run("pytest", f"{example.path}/tests", *session.posargs)
    session.run("python", "-m", "tasks_contract_tests", "--store-url", "acme://")


@contextlib.contextmanager
def store_url(session: nox.Session, store: str) -> Iterator[str]:
    """The URL of ``store`` for this session (``TASKS_<NAME>_URL`` overrides), its server
    started when the table says so; an unreachable server skips (fails under CI)."""
    spec = STORES[store]
    env = f"TASKS_{store.upper().replace('-', '_')}_URL"
    url = os.environ.get(env, spec.url).replace("{tmp}", session.create_tmp())
    if spec.server and not spec.probe(url):
        unavailable(session, f"{store}: no server answers at {url}; start it or set {env}")
    with spec.serve(session) if spec.serve else contextlib.nullcontext("") as server:
        yield url.replace("{server}", server)


@nox.session(tags=["stress"])
@nox.parametrize("store", list(RELIABILITY), ids=list(RELIABILITY))
def stress(session: nox.Session, store: str) -> None:
    """`tasks stress` on one store: CAS contention and the runner soak with real processes,
    exact invariants; the JSON report goes to build/reliability/."""
    install(session, *STORES[store].targets)
    with store_url(session, store) as url:
        session.run("tasks", "stress", "--store", url,
                    "--out", str(REPORTS / f"stress-{store}.json"), *session.posargs)


@nox.session(tags=["chaos"])
@nox.parametrize("store", list(RELIABILITY), ids=list(RELIABILITY))
def chaos(session: nox.Session, store: str) -> None:
    """Every chaos scenario on one store (SIGKILL, SIGSTOP, SIGTERM, database faults — the
    PostgreSQL one restarts the local server); the JSON report goes to build/reliability/.
    `python -m tasks_contract_tests.stress.report build/reliability/*.json` then writes
    docs/reliability.md."""
    install(session, *STORES[store].targets)
    with store_url(session, store) as url:
        session.run("python", "-m", "tasks_contract_tests.chaos", "--store", url,
                    "--out", str(REPORTS / f"chaos-{store}.json"), *session.posargs)


@nox.session(tags=["all"])
def reliability(session: nox.Session) -> None:
    """The fast subset of `stress` and `chaos` for CI: small stress runs and the SIGKILL
    and SIGSTOP scenarios, on SQLite and PostgreSQL."""
    install(session, *STORES["postgresql"].targets)
    for store in ("sqlite", "postgresql"):
        with store_url(session, store) as url:
            session.run("tasks", "stress", "--store", url, "--small")
            session.run("python", "-m", "tasks_contract_tests.chaos", "--store", url, "--fast")


BENCH_POSTGRES = "postgresql://postgres@127.0.0.1:5432/tasks_bench"
PGQUEUER = "pgqueuer==1.6.0"
HUEY = "huey==3.5.4"  # the SQLite peer of a submit (bench/submits.py)


@nox.session(tags=["bench"])
def bench(session: nox.Session) -> None:
    """The hot-path benchmark (packages/store-sql/bench): burn-down, enqueue, enqueue→start
    latency and commits per task on memory, SQLite and PostgreSQL, as ratios to baselines
    measured in the same run; on PostgreSQL also the ratio to pgqueuer and how late delayed
    tasks start past their `run_at` (bench/delay_latency.py); last, the submit rates against
    pgqueuer's enqueue and bare INSERT loops on SQLite and MariaDB (bench/submits.py;
    `TASKS_BENCH_MARIADB_URL`, skipped when down); then MongoDB against PostgreSQL, its
    write concern on and off (bench/mongo.py), on a SecantusDB started here on disk
    (`TASKS_BENCH_MONGO_URL` instead; skipped when neither). A benchmark, not a test:
    tagged `bench`, never `all` (CI).
    PostgreSQL is a database of its own (`TASKS_BENCH_POSTGRES_URL`, created if missing);
    unreachable, the session skips. `nox -s bench -- --tasks 20000 --stores postgresql`."""
    url = os.environ.get("TASKS_BENCH_POSTGRES_URL", BENCH_POSTGRES)
    stores = next((a.split("=", 1)[1] for a in session.posargs if a.startswith("--stores=")),
                  "postgresql" if "--stores" not in session.posargs else
                  session.posargs[session.posargs.index("--stores") + 1])
    if "postgresql" in stores and not reachable(url):
        session.skip(f"bench: no PostgreSQL answers at {url}; start it or set "
                     "TASKS_BENCH_POSTGRES_URL (or pass --stores memory,sqlite)")
    install(session, "core", "store-memory", "store-sql[mysql]", "store-mongo")
    session.install(PGQUEUER, HUEY)  # the peers, measured in the same run (bench/peers.py)
    data = Path(session.create_tmp()) / "secantusdb"  # on disk: journaling is measured
    shutil.rmtree(data, ignore_errors=True)
    given = os.environ.get("TASKS_BENCH_MONGO_URL")
    with (contextlib.nullcontext(given) if given
          else secantusdb(session, str(data), required=False)) as mongo:
        session.run("python", str(ROOT / "packages/store-sql/bench/bench.py"),
                    "--postgres-url", url, "--mongo-url", mongo, *session.posargs)


MUTMUT = "mutmut==3.8.1"
MUTANTS = ROOT / "packages/contract-tests/mutants"  # mutants.toml: what, which tests, equivalents


def run_mutants(session: nox.Session, *, sample: bool) -> None:
    """mutmut over a copy (never the checkout) of the sources mutants.toml names, against
    its tests; then the check: any survivor not listed there as equivalent fails."""
    install(session, *SUITE)
    session.install(MUTMUT)
    stage = Path(session.create_tmp()) / "mutants"  # src/, tests/, pyproject.toml: mutmut's
    helper = ["python", str(MUTANTS / "mutants.py")]
    session.run(*helper, "stage", "--root", str(ROOT), "--dest", str(stage))
    names = session.run(*helper, "sample", silent=True).split() if sample else []
    with session.chdir(stage):
        session.run("mutmut", "run", *names)
    report = ["--sample"] if sample else ["--docs", str(ROOT / "docs" / "contract.md")]
    session.run(*helper, "check", "--dest", str(stage), *report)


@nox.session(tags=["mutants"])
def mutants(session: nox.Session) -> None:
    """Mutation testing (mutmut) of tasks_core.rules, arguments, storekit and the memory
    store against the contract suite and the rule tests; writes the score to
    docs/contract.md ("Mutation score"). About 15 minutes on 2 CPUs: not in `all`.
    `nox -s mutants -- --sample`: the CI sample only (mutants.toml), docs untouched."""
    run_mutants(session, sample="--sample" in session.posargs)


@nox.session(name="mutants-sample", tags=["all"])
def mutants_sample(session: nox.Session) -> None:
    """The sample of `mutants` that CI runs (mutants.toml `sample`, about a minute): fails
    when one of its mutants survives that mutants.toml does not list as equivalent."""
    run_mutants(session, sample=True)
