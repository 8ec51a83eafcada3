from __future__ import annotations

from typing import Any

import pytest

from app.files.filters import FilterError, matches, validate_filter

ATTRIBUTES: dict[str, Any] = {
    "author": "ada",
    "year": 2021,
    "score": 4.5,
    "draft": False,
    "region": "eu-west",
}


def eq(key: str, value: Any) -> dict[str, Any]:
    return {"type": "eq", "key": key, "value": value}


def cmp(kind: str, key: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "key": key, "value": value}


@pytest.mark.parametrize(
    ("filter", "expected"),
    [
        # eq / ne
        (eq("author", "ada"), True),
        (eq("author", "Ada"), False),
        (eq("year", 2021), True),
        (eq("year", 2021.0), True),  # numbers compare numerically
        (eq("year", "2021"), False),  # a string is not a number
        (eq("draft", False), True),
        (eq("draft", 0), False),  # booleans are not numbers
        (eq("missing", "x"), False),
        (cmp("ne", "author", "bob"), True),
        (cmp("ne", "author", "ada"), False),
        (cmp("ne", "missing", "x"), True),  # a missing key is "not equal"
        (cmp("ne", "year", "2021"), True),
        # ordering: numbers
        (cmp("gt", "year", 2020), True),
        (cmp("gt", "year", 2021), False),
        (cmp("gte", "year", 2021), True),
        (cmp("lt", "score", 5), True),
        (cmp("lte", "score", 4.5), True),
        (cmp("lt", "score", 4.5), False),
        # ordering: strings, lexicographically
        (cmp("gt", "author", "abc"), True),
        (cmp("lt", "region", "eu-z"), True),
        (cmp("gte", "region", "eu-west"), True),
        # ordering across kinds is false, both ways
        (cmp("gt", "author", 1), False),
        (cmp("lt", "year", "9999"), False),
        (cmp("gt", "draft", -1), False),
        (cmp("gt", "missing", 0), False),
        (cmp("lte", "missing", "z"), False),
        # in / nin
        (cmp("in", "author", ["bob", "ada"]), True),
        (cmp("in", "author", ["bob"]), False),
        (cmp("in", "year", [2020, 2021.0]), True),
        (cmp("in", "year", ["2021"]), False),
        (cmp("in", "missing", ["x"]), False),
        (cmp("in", "author", []), False),
        (cmp("nin", "author", ["bob"]), True),
        (cmp("nin", "author", ["ada", "bob"]), False),
        (cmp("nin", "missing", ["x"]), True),
        (cmp("nin", "author", []), True),
        # compound
        ({"type": "and", "filters": [eq("author", "ada"), cmp("gte", "year", 2020)]}, True),
        ({"type": "and", "filters": [eq("author", "ada"), cmp("gt", "year", 2021)]}, False),
        ({"type": "or", "filters": [eq("author", "bob"), cmp("gt", "year", 2021)]}, False),
        ({"type": "or", "filters": [eq("author", "bob"), eq("draft", False)]}, True),
        ({"type": "and", "filters": []}, True),
        ({"type": "or", "filters": []}, False),
        # nested: (author = ada AND (year < 2000 OR region in [eu-west])) OR draft = true
        (
            {
                "type": "or",
                "filters": [
                    {
                        "type": "and",
                        "filters": [
                            eq("author", "ada"),
                            {
                                "type": "or",
                                "filters": [
                                    cmp("lt", "year", 2000),
                                    cmp("in", "region", ["eu-west", "us-east"]),
                                ],
                            },
                        ],
                    },
                    eq("draft", True),
                ],
            },
            True,
        ),
        (
            {
                "type": "and",
                "filters": [
                    {"type": "or", "filters": [eq("author", "bob"), eq("author", "eve")]},
                    cmp("nin", "region", ["us-east"]),
                ],
            },
            False,
        ),
    ],
)
def test_matches(filter: dict[str, Any], expected: bool) -> None:
    assert matches(validate_filter(filter), ATTRIBUTES) is expected


def test_validate_returns_a_clean_copy() -> None:
    original = {"type": "in", "key": "k", "value": ["a", 1, True]}
    validated = validate_filter(original)
    assert validated == original
    assert validated is not original
    assert validated["value"] is not original["value"]


@pytest.mark.parametrize(
    ("value", "param", "message"),
    [
        ("eq", "filters", "expected an object, but got a string"),
        ({}, "filters.type", "Missing required parameter: 'filters.type'"),
        ({"type": "like", "key": "a", "value": "b"}, "filters.type", "Supported values"),
        ({"type": "eq", "value": 1}, "filters.key", "Missing required parameter"),
        ({"type": "eq", "key": 1, "value": 1}, "filters.key", "expected a non-empty string"),
        ({"type": "eq", "key": "", "value": 1}, "filters.key", "non-empty string"),
        ({"type": "eq", "key": "a"}, "filters.value", "Missing required parameter"),
        ({"type": "eq", "key": "a", "value": None}, "filters.value", "got null"),
        ({"type": "eq", "key": "a", "value": {"x": 1}}, "filters.value", "got an object"),
        ({"type": "eq", "key": "a", "value": [1]}, "filters.value", "got an array"),
        ({"type": "gt", "key": "a", "value": True}, "filters.value", "numbers or strings"),
        ({"type": "lt", "key": "a", "value": float("nan")}, "filters.value", "finite"),
        ({"type": "in", "key": "a", "value": "x"}, "filters.value", "'in' expects an array"),
        ({"type": "nin", "key": "a", "value": [1, [2]]}, "filters.value[1]", "got an array"),
        ({"type": "eq", "key": "a", "value": 1, "x": 2}, "filters.x", "Unknown parameter"),
        ({"type": "and"}, "filters.filters", "Missing required parameter"),
        ({"type": "or", "filters": {}}, "filters.filters", "expected an array"),
        ({"type": "and", "filters": [], "key": "a"}, "filters.key", "Unknown parameter"),
        (
            {"type": "and", "filters": [eq("a", 1), {"type": "or", "filters": [{"type": "eq"}]}]},
            "filters.filters[1].filters[0].key",
            "Missing required parameter: 'filters.filters[1].filters[0].key'",
        ),
    ],
)
def test_validate_rejects(value: Any, param: str, message: str) -> None:
    with pytest.raises(FilterError) as info:
        validate_filter(value)
    assert info.value.param == param
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_validate_param_prefix() -> None:
    with pytest.raises(FilterError) as info:
        validate_filter({"type": "eq", "key": "a"}, param="tools[0].filters")
    assert info.value.param == "tools[0].filters.value"


def test_nesting_is_bounded() -> None:
    value: dict[str, Any] = eq("a", 1)
    for _ in range(40):
        value = {"type": "and", "filters": [value]}
    with pytest.raises(FilterError, match="nest deeper"):
        validate_filter(value)
    shallow: dict[str, Any] = eq("a", 1)
    for _ in range(10):
        shallow = {"type": "or", "filters": [shallow]}
    assert matches(validate_filter(shallow), {"a": 1})
