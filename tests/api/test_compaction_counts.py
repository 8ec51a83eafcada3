"""Automatic compaction (``context_management``) measures the threshold with the upstream's
tokenizer (``/tokenize``, as ``/v1/responses/input_tokens`` counts) where it has one, and only
near the threshold: far under or far over it the estimate (UTF-8 bytes / 4) decides and the
upstream is not asked. The scripted tokenizer counts words, so inputs of short and of long
words put the estimate on either side of the exact count."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from app.main import create_app
from app.settings import Settings
from tests.api.test_compaction import MODEL, SUMMARY, SummarizingUpstream
from tests.api.tokenizing_upstreams import TokenizerLog, tokenizing_app, words
from tests.helpers import in_process, openai_client, serve_in_thread


@pytest.fixture
def gateway() -> Iterator[tuple[openai.OpenAI, SummarizingUpstream, TokenizerLog]]:
    server = SummarizingUpstream()
    log = TokenizerLog()
    app = tokenizing_app(server, log, max_model_len=None, tokenize=True)
    with serve_in_thread(app) as url, in_process(create_app(Settings(upstream_url=url))) as http:
        yield openai_client(http), server, log


def _create(client: openai.OpenAI, text: str, threshold: int) -> Any:
    managed: Any = [{"type": "compaction", "compact_threshold": threshold}]
    return client.responses.create(model=MODEL, input=text, context_management=managed)


def _compacted(response: Any) -> bool:
    return [item.type for item in response.output] == ["compaction", "message"]


def test_near_the_threshold_the_tokenizer_decides_over_an_estimate_under_it(
    gateway: tuple[openai.OpenAI, SummarizingUpstream, TokenizerLog],
) -> None:
    client, server, log = gateway
    # 400 one-letter words: ~200 estimated tokens (2 bytes a word), 400 counted.
    response = _create(client, words(400), threshold=320)
    assert len(log.tokenized) == 1  # asked once: the estimate (about 200) was near 320
    assert _compacted(response)
    assert SUMMARY in json.dumps(server.requests[-1])


def test_near_the_threshold_the_tokenizer_decides_under_an_estimate_over_it(
    gateway: tuple[openai.OpenAI, SummarizingUpstream, TokenizerLog],
) -> None:
    client, server, log = gateway
    # 200 nine-byte words: ~450 estimated tokens, 200 counted.
    response = _create(client, words(200, "wordwordw"), threshold=300)
    assert len(log.tokenized) == 1
    assert not _compacted(response)
    assert len(server.requests) == 1  # no summary round


def test_far_from_the_threshold_nothing_is_counted(
    gateway: tuple[openai.OpenAI, SummarizingUpstream, TokenizerLog],
) -> None:
    client, server, log = gateway
    under = _create(client, "Hi.", threshold=100_000)
    assert not _compacted(under) and log.tokenized == []
    over = _create(client, words(2_000, "wordwordw"), threshold=100)
    assert _compacted(over) and log.tokenized == []
    assert len(server.requests) == 3  # one turn, then a summary round and its turn
