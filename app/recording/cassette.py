"""Cassettes: recorded upstream HTTP traffic, loaded from and written to disk.

Three on-disk formats are understood by :func:`load_cassette`:

1. **Recorder YAML** (the main format, also what :func:`dump_cassette` writes): a top-level
   ``turns`` list; every turn has ``filename`` (``t1``, ``t2``, ...), ``request``
   (``method``, ``path``, ``query_params``, ``headers``, ``body``) and ``response``
   (``status_code``, ``headers`` and either ``body`` - parsed JSON - or ``sse`` - the raw SSE
   lines, each ending with a newline). Other top-level keys (e.g. SGLang's ``provider`` block)
   are kept in :attr:`Cassette.extra`.
2. **Event fixtures** (YAML with top-level ``model``, ``request`` and ``sse``, a list of
   ``data: {json}`` strings without ``event:`` lines or blank separators): loaded as one
   ``POST /v1/responses`` turn whose SSE is each data line followed by a blank line.
3. **JSON** ``{"metadata": ..., "turns": [{"request": {method, path, body},
   "response": {status_code, body}}]}`` (no headers): same turn model.

A missing ``status_code`` means 200; a missing ``filename`` becomes ``t<position>``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_YamlLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# The pure-Python dumper reproduces the recorder's output byte for byte (libyaml's emitter
# wraps long non-ASCII scalars differently), so it is used for writing.
_YamlDumper = yaml.SafeDumper

#: The quick start's cassette, shipped inside the package (``respgate demo``'s default): vLLM
#: serving openai/gpt-oss-20b, one prompt answered as JSON and as a stream.
QUICKSTART_CASSETTE = Path(__file__).resolve().parent / "bundled" / "quickstart-vllm-gpt-oss.yaml"

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
JSON_CONTENT_TYPE = "application/json"

#: Request headers kept in recordings (lower-case names).
KEPT_HEADERS = frozenset(
    {"accept", "content-type", "user-agent", "openai-beta", "x-run-id", "authorization"}
)
MASKED_AUTHORIZATION = "Bearer ***"


class CassetteError(ValueError):
    """A cassette file cannot be read or has an unexpected shape."""


@dataclass
class RecordedRequest:
    """The request half of a turn, as the client sent it upstream."""

    method: str
    path: str
    body: Any | None = None
    headers: dict[str, str] = field(default_factory=dict)
    query_params: dict[str, Any] = field(default_factory=dict)


@dataclass
class RecordedResponse:
    """The response half of a turn: a JSON ``body`` or raw ``sse`` lines."""

    status_code: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any | None = None
    sse: list[str] | None = None

    @property
    def is_sse(self) -> bool:
        return self.sse is not None

    @property
    def content_type(self) -> str:
        for name, value in self.headers.items():
            if name.lower() == "content-type":
                return value
        return SSE_CONTENT_TYPE if self.is_sse else JSON_CONTENT_TYPE


@dataclass
class Turn:
    """One HTTP exchange."""

    request: RecordedRequest
    response: RecordedResponse
    filename: str = ""


@dataclass
class Cassette:
    """An ordered list of turns plus any other top-level keys of the file."""

    turns: list[Turn] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Loading


def load_cassette(path: str | os.PathLike[str]) -> Cassette:
    """Load a cassette in any of the three supported formats (see the module docstring)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise CassetteError(f"cannot read cassette {file}: {exc}") from exc
    try:
        data: Any = (
            json.loads(text) if file.suffix.lower() == ".json" else yaml.load(text, _YamlLoader)
        )
    except json.JSONDecodeError as exc:
        raise CassetteError(
            f"cannot parse cassette {file}: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    except yaml.YAMLError as exc:
        raise CassetteError(f"cannot parse cassette {file}: {_yaml_problem(exc)}") from exc
    return parse_cassette(data, source=str(file))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """``line L, column C: problem`` of a YAML error, on one line."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return " ".join(str(exc).split())


def parse_cassette(data: Any, source: str = "<cassette>") -> Cassette:
    """Build a :class:`Cassette` from already-parsed YAML/JSON data."""
    if not isinstance(data, Mapping):
        raise CassetteError(f"{source}: expected a mapping at the top level")
    if "turns" in data:
        raw_turns = data["turns"]
        if not isinstance(raw_turns, list):
            raise CassetteError(f"{source}: 'turns' must be a list")
        turns = [_parse_turn(raw, i, source) for i, raw in enumerate(raw_turns)]
        extra = {str(k): v for k, v in data.items() if k != "turns"}
        return Cassette(turns=turns, extra=extra)
    if "sse" in data:
        return _parse_event_fixture(data, source)
    if "sessions" in data:
        raise CassetteError(f"{source}: WebSocket session recordings are not supported")
    raise CassetteError(f"{source}: unrecognized cassette format (no 'turns' or 'sse' key)")


def _parse_turn(raw: Any, index: int, source: str) -> Turn:
    where = f"{source}: turn {index + 1}"
    if not isinstance(raw, Mapping):
        raise CassetteError(f"{where}: expected a mapping")
    req = raw.get("request")
    resp = raw.get("response")
    if not isinstance(req, Mapping) or not isinstance(resp, Mapping):
        raise CassetteError(f"{where}: 'request' and 'response' mappings are required")
    method = req.get("method")
    path = req.get("path")
    if not isinstance(method, str) or not isinstance(path, str):
        raise CassetteError(f"{where}: request 'method' and 'path' are required strings")
    sse = resp.get("sse")
    if sse is not None and not (isinstance(sse, list) and all(isinstance(x, str) for x in sse)):
        raise CassetteError(f"{where}: response 'sse' must be a list of strings")
    status = resp.get("status_code")
    request = RecordedRequest(
        method=method.upper(),
        path=path,
        body=req.get("body"),
        headers=_str_dict(req.get("headers")),
        query_params=dict(req.get("query_params") or {}),
    )
    response = RecordedResponse(
        status_code=int(status) if status is not None else 200,
        headers=_str_dict(resp.get("headers")),
        body=resp.get("body"),
        sse=list(sse) if sse is not None else None,
    )
    filename = raw.get("filename")
    return Turn(
        request=request,
        response=response,
        filename=str(filename) if filename is not None else f"t{index + 1}",
    )


def _parse_event_fixture(data: Mapping[str, Any], source: str) -> Cassette:
    lines = data["sse"]
    if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
        raise CassetteError(f"{source}: 'sse' must be a list of strings")
    body: dict[str, Any] = {}
    if data.get("model") is not None:
        body["model"] = data["model"]
    request_body = data.get("request")
    if isinstance(request_body, Mapping):
        body.update(request_body)
    sse: list[str] = []
    for line in lines:
        sse.append(line.rstrip("\r\n") + "\n")
        sse.append("\n")
    turn = Turn(
        filename="t1",
        request=RecordedRequest(
            method="POST",
            path="/v1/responses",
            body=body,
            headers={"content-type": JSON_CONTENT_TYPE},
        ),
        response=RecordedResponse(
            status_code=200, headers={"content-type": SSE_CONTENT_TYPE}, sse=sse
        ),
    )
    extra = {str(k): v for k, v in data.items() if k not in ("sse", "request")}
    return Cassette(turns=[turn], extra=extra)


def _str_dict(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


# ---------------------------------------------------------------------------------------------
# Writing


def turn_to_dict(turn: Turn) -> dict[str, Any]:
    """The recorder's YAML shape of one turn."""
    response: dict[str, Any] = {
        "status_code": turn.response.status_code,
        "headers": dict(turn.response.headers),
    }
    if turn.response.sse is not None:
        response["sse"] = list(turn.response.sse)
    else:
        response["body"] = turn.response.body
    return {
        "filename": turn.filename,
        "request": {
            "method": turn.request.method,
            "path": turn.request.path,
            "query_params": dict(turn.request.query_params),
            "headers": dict(turn.request.headers),
            "body": turn.request.body,
        },
        "response": response,
    }


def cassette_to_dict(cassette: Cassette) -> dict[str, Any]:
    data: dict[str, Any] = dict(cassette.extra)
    data["turns"] = [turn_to_dict(t) for t in cassette.turns]
    return data


def dump_cassette_text(cassette: Cassette) -> str:
    """Serialize like the recorder: PyYAML block style, keys sorted, unicode kept."""
    return yaml.dump(
        cassette_to_dict(cassette),
        Dumper=_YamlDumper,
        default_flow_style=False,
        allow_unicode=True,
        sort_keys=True,
    )


def dump_cassette(cassette: Cassette, path: str | os.PathLike[str]) -> None:
    """Write ``cassette`` to ``path`` in the recorder's YAML format, atomically."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = dump_cassette_text(cassette)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------------------
# Helpers


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Keep the recorded header subset (lower-cased names); mask ``authorization``."""
    kept: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if key not in KEPT_HEADERS:
            continue
        kept[key] = MASKED_AUTHORIZATION if key == "authorization" else value
    return kept


def split_sse_lines(text: str) -> list[str]:
    """Split a raw SSE body into lines, keeping each line's ``\\n`` ending.

    Only ``\\n`` separates lines (``str.splitlines`` would also split on U+2028 and friends,
    which may legitimately appear inside JSON payloads).
    """
    lines = text.split("\n")
    result = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        result.append(lines[-1])
    return result


def sse_data_events(turn: Turn | RecordedResponse) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE turn's events, in order (``[DONE]`` skipped).

    Consecutive ``data:`` lines of one event are joined with ``\\n`` as the SSE spec says;
    an event ends at a blank line. Payloads that are not JSON objects are skipped.
    """
    response = turn.response if isinstance(turn, Turn) else turn
    events: list[dict[str, Any]] = []
    data_lines: list[str] = []

    def flush() -> None:
        if not data_lines:
            return
        payload = "\n".join(data_lines)
        data_lines.clear()
        if payload.strip() == "[DONE]":
            return
        try:
            value = json.loads(payload)
        except json.JSONDecodeError:
            return
        if isinstance(value, dict):
            events.append(value)

    for raw in response.sse or []:
        line = raw.rstrip("\r\n")
        if not line:
            flush()
        elif line.startswith("data:"):
            value = line[5:]
            data_lines.append(value[1:] if value.startswith(" ") else value)
    flush()
    return events


def recorded_models(cassette: Cassette) -> list[str]:
    """Distinct ``model`` values of the recorded request bodies, in first-seen order."""
    models: list[str] = []
    for turn in cassette.turns:
        body = turn.request.body
        if isinstance(body, Mapping):
            model = body.get("model")
            if isinstance(model, str) and model not in models:
                models.append(model)
    extra_model = cassette.extra.get("model")
    if isinstance(extra_model, str) and extra_model not in models:
        models.append(extra_model)
    return models
