"""Prerequisites of the Python tests (the pytest suites and the unittest CLI tests), the Python
twin of prerequisites.h: a test that needs something the checkout may lack (the built kvserve,
the default model, Gemma 3 270M, redis-server, chromium and selenium) skips without it on a
developer's machine, and FAILS under CI (CI=true, as CI services set it): there scripts/test
installs and fetches all of it, and a skip would read as a pass that checked nothing.

    from prerequisites import require, requires
    require(os.path.exists(path), "gemma3-270m not fetched (scripts/fetch-model gemma3-270m)")

    @requires(os.path.exists(MODEL), "default model not fetched")   # a unittest.TestCase class
    class Generate(unittest.TestCase): ...

Import it after putting this directory on sys.path (tests/server/conftest.py does it for the
pytest suites; the CLI tests do it themselves).
"""
import os
import unittest


def running_in_ci():
    """True when $CI is set to anything but "", "0" or "false" (CI services set CI=true)."""
    return os.environ.get("CI", "") not in ("", "0", "false")


class MissingPrerequisite(AssertionError):
    """A prerequisite is missing under CI: a failure, never a skip."""


def require(ok, why):
    """Returns when `ok`; otherwise skips the current test, or fails it under CI. Works in a
    pytest test or fixture and in a unittest test, setUp or setUpClass."""
    if ok:
        return
    if running_in_ci():
        raise MissingPrerequisite(f"missing prerequisite (a failure because CI is set): {why}")
    why = f"{why} (a failure under CI=true)"
    if "PYTEST_CURRENT_TEST" in os.environ:  # inside a pytest test: report the caller's line
        import pytest
        pytest.skip(why)
    raise unittest.SkipTest(why)


def requires(ok, why):
    """Class decorator, require() for every test of a unittest.TestCase class: checked in its
    setUpClass, when its tests run (not when the module is imported)."""
    def decorate(cls):
        if not ok:
            cls.setUpClass = classmethod(lambda c: require(False, why))
        return cls
    return decorate
