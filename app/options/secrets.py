"""Secrets from files: the Docker and Kubernetes convention ``<VARIABLE>_FILE``.

- Every setting: ``RESPGATE_<NAME>_FILE=/run/secrets/<file>`` gives the setting the file's
  contents, exactly as ``RESPGATE_<NAME>`` would (nested keys with ``__``:
  ``RESPGATE_AUTH__API_KEYS_FILE``; lists and tables as JSON). ``SecretFileSettingsSource``
  reads them, after the environment and before the TOML file.
- Every environment variable the configuration names as where a secret is
  (``[[upstreams]] api_key_env``, ``headers_from_env`` of MCP servers and REST engines, the
  REST engines' ``token_env`` ...): ``<VARIABLE>_FILE`` works too (``SecretEnviron``).

A file's contents lose one trailing newline (``echo key > file`` writes one). Setting both
``X`` and ``X_FILE`` is an error, and so is a file that cannot be read: ``SecretFileError``,
one line naming the variable, never the contents.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_settings import BaseSettings, EnvSettingsSource

FILE_SUFFIX = "_FILE"


class SecretFileError(ValueError):
    """A ``*_FILE`` variable names a file that cannot be read, or is set besides its
    variable; the message names the variable."""


def read_secret_file(variable: str, path: str) -> str:
    """The contents of the file variable ``variable`` names, less one trailing newline."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SecretFileError(f"{variable} names {path}, which cannot be read: {reason}") from None
    return text.removesuffix("\n").removesuffix("\r")


def _both_set(variable: str) -> SecretFileError:
    return SecretFileError(f"{variable} and {variable}{FILE_SUFFIX} are both set: set one of them")


class SecretEnviron(Mapping[str, str]):
    """The environment, where ``X`` is also found in the file ``X_FILE`` names (read when it
    is looked up, so a rotated file is read afresh)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ: Mapping[str, str] = os.environ if environ is None else environ

    def __getitem__(self, name: str) -> str:
        path = self._environ.get(name + FILE_SUFFIX)
        value = self._environ.get(name)
        if value is not None:
            if path is not None:
                raise _both_set(name)
            return value
        if path is None:
            raise KeyError(name)
        return read_secret_file(name + FILE_SUFFIX, path)

    def __iter__(self) -> Iterator[str]:
        seen = set(self._environ)
        yield from self._environ
        for name in list(self._environ):
            base = name.removesuffix(FILE_SUFFIX)
            if base != name and base and base not in seen:
                seen.add(base)
                yield base

    def __len__(self) -> int:
        return sum(1 for _ in self)


def secret_environ() -> SecretEnviron:
    """The process environment, with ``X_FILE`` for every ``X``."""
    return SecretEnviron()


class SecretFilesEnvSource(EnvSettingsSource):
    """The environment source of pydantic-settings where ``RESPGATE_<NAME>_FILE`` stands for
    ``RESPGATE_<NAME>`` with the contents of the file it names (see the module docstring)."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        loaded = dict(super()._load_env_vars())  # lower-case names unless case-sensitive
        prefix = self.env_prefix if self.case_sensitive else self.env_prefix.lower()
        suffix = FILE_SUFFIX if self.case_sensitive else FILE_SUFFIX.lower()
        delimiter = self.env_nested_delimiter or "\0"
        for name in [n for n in loaded if n.startswith(prefix) and n.endswith(suffix)]:
            key = name[len(prefix) : -len(suffix)]
            if not key or names_setting(self.settings_cls, name[len(prefix) :], delimiter):
                continue  # a setting whose own name ends in _file
            if not names_setting(self.settings_cls, key, delimiter):
                continue
            if prefix + key in loaded:
                raise _both_set(_shown(prefix + key))
            path = loaded.pop(name)
            if path is not None:
                loaded[prefix + key] = read_secret_file(_shown(name), path)
        return loaded


def _shown(name: str) -> str:
    """A variable's name as users write it (the source holds them in lower case)."""
    return name.upper()


def names_setting(model: type[BaseSettings] | type[BaseModel], key: str, delimiter: str) -> bool:
    """Whether ``key`` (lower case, nested keys joined by ``delimiter``) names a setting of
    ``model``: a field, a field of a field's model, or an entry of a table."""
    annotation: Any = model
    for part in key.split(delimiter):
        fields = _fields_of(annotation)
        if fields is None:
            table = _table_values(annotation)
            if table is None or not part:
                return False
            annotation = table
            continue
        field = fields.get(part)
        if field is None:
            return False
        annotation = field
    return True


def _fields_of(annotation: Any) -> dict[str, Any] | None:
    """The fields (lower-case names -> annotations) of a model, or of the one model in an
    optional; None for anything else."""
    for candidate in _unwrapped(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return {name.lower(): f.annotation for name, f in candidate.model_fields.items()}
    return None


def _table_values(annotation: Any) -> Any:
    """The value type of a ``dict[str, X]`` (optional or not); None for anything else."""
    for candidate in _unwrapped(annotation):
        if typing.get_origin(candidate) is dict:
            args = typing.get_args(candidate)
            return args[1] if len(args) == 2 else Any
    return None


def _unwrapped(annotation: Any) -> list[Any]:
    """``X | None`` and ``Optional[X]`` as their members; anything else as itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return [annotation]
