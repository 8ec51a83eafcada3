"""Reading ``GET /metrics`` in tests: every sample by name and labels."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_samples(text: str) -> Samples:
    """Every sample of an exposition, keyed by its name and its labels."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when there is none)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, found), v in samples.items() if n == name and wanted <= found)


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {
        dict(found)[label]
        for (n, found), _ in samples.items()
        if n == name and label in dict(found)
    }


def scrape_until(
    get: Callable[[], Any], ready: Callable[[Samples], bool], *, attempts: int = 200
) -> Samples:
    """Scrape (``get`` answers ``GET /metrics``) until ``ready`` holds: the tool-call events
    reach the metrics through the event bus, a moment after the response."""
    samples: Samples = {}
    for _ in range(attempts):
        reply = get()
        assert reply.status_code == 200, reply.text
        samples = parse_samples(reply.text)
        if ready(samples):
            return samples
        time.sleep(0.025)
    return samples


def names_in(samples: Mapping[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    return {name for name, _ in samples}
