"""The typed ``**options`` of the calls that pass a submit's or a worker's options on
(``TaskDef.submit``, ``app.sync.submit``, ``app.worker``, ``app.run_worker``)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest
from tasks_core import SubmitOptions, Worker, WorkerOptions
from tasks_core.runtime._client import Client


def _keywords(call: Callable[..., Any]) -> dict[str, Any]:
    """The keyword-only parameters of ``call`` and their types."""
    hints = typing.get_type_hints(call)
    return {name: hints[name] for name, parameter in inspect.signature(call).parameters.items()
            if parameter.kind is parameter.KEYWORD_ONLY}


@pytest.mark.parametrize(("options", "call"), [
    (SubmitOptions, Client.submit),
    (WorkerOptions, Worker.__init__),
])
def test_an_options_type_names_every_keyword_of_its_call_with_its_type(
    options: type, call: Callable[..., Any]
) -> None:
    """``SubmitOptions`` and ``WorkerOptions`` MUST name exactly the keyword options of
    ``App.submit`` and ``Worker(...)``, with the same types: the calls that pass options on
    are typed by them, so a missing name makes a type checker refuse a good option and a
    stale one lets a misspelt option through (a ``TypeError`` at run time)."""
    assert _keywords(call) == typing.get_type_hints(options)
