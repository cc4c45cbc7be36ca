"""The runtime: the ``App`` (client API) and the ``Worker`` that runs handlers.

Below the model (``tasks_core.models``, ``rules``, ``store``) and above it only the CLI.
``app`` is the client API and the worker's home; ``worker`` claims and starts runs;
``_run`` is one run of a handler (heartbeats, timeouts, progress, input parking, writes).
The public names are re-exported by :mod:`tasks_core`; every other module is private.
"""
