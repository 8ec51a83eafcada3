"""Under CI=true every skip is a failure that keeps its reason (the hook in tests/conftest.py)."""

from __future__ import annotations

import pytest

EXAMPLE = """
import pytest

def test_needs_something():
    pytest.skip("PostgreSQL is not answering")

@pytest.mark.skipif(True, reason="Node.js is not installed")
def test_marked():
    pass

@pytest.mark.xfail(reason="a known bug")
def test_known_bug():
    assert False

def test_plain():
    pass
"""


@pytest.fixture
def example(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest("from tests.conftest import pytest_runtest_makereport  # noqa: F401\n")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_example=EXAMPLE)
    return pytester


@pytest.mark.parametrize("value", ["true", "1", "TRUE", "yes"])
def test_under_ci_a_skip_fails_with_its_reason(
    example: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CI", value)
    result = example.runpytest("-p", "no:cacheprovider")
    # A skip while setting up (a skipif mark, a fixture that skips) fails as a setup error.
    result.assert_outcomes(failed=1, errors=1, passed=1, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            "*CI is set, so a skip is a failure: Skipped: PostgreSQL is not answering*",
            "*CI is set, so a skip is a failure: Skipped: Node.js is not installed*",
        ]
    )


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_outside_ci_a_skip_stays_a_skip(
    example: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    result = example.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=2, passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*PostgreSQL is not answering*", "*Node.js is not installed*"])
