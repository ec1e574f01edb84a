"""What the hook tests of every agent share: the registration of the hook scripts here, with this interpreter (the
install tests' own, tests/agents/conftest.py)."""

from tests.agents.conftest import registration  # noqa: F401 - a fixture: found by its name
