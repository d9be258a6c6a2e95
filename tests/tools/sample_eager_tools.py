"""A tool module that wrongly reads the registry at import time (used by the tests)."""

from plans.tools import get_registry

KNOWN_AT_IMPORT = get_registry()
