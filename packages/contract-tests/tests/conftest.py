"""Self-tests of the contract suite run broken stores through ``pytester``."""

pytest_plugins = ["pytester"]
