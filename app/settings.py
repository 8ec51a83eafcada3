"""Gateway configuration: CLI flags > environment (``RESPGATE_*``) > TOML file > defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


class Settings(BaseSettings):
    """Every key here is documented, with its default, in config/respgate.example.toml."""

    model_config = SettingsConfigDict(env_prefix="RESPGATE_", extra="forbid")

    host: str = "0.0.0.0"
    port: int = 9000
    data_dir: Path = Path("./data")
    log_level: str = "info"

    # Default: None, meaning the SQLite file respgate.db in data_dir (see resolved_database_url).
    database_url: str | None = None

    upstream_url: str = "http://127.0.0.1:8000"
    upstream_api_key: str | None = None
    upstream_connect_timeout: float = Field(default=10.0, gt=0)
    upstream_read_timeout: float = Field(default=600.0, gt=0)
    upstream_max_connections: int = Field(default=256, ge=1)

    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    wait_for_upstream: float = Field(default=0.0, ge=0)

    @field_validator("upstream_url")
    @classmethod
    def _strip_url(cls, value: str) -> str:
        value = value.rstrip("/")
        if value.endswith("/v1"):
            value = value[: -len("/v1")]
        return value

    def resolved_database_url(self) -> str:
        """The async SQLAlchemy URL of the store.

        Unset (or empty): the SQLite file ``respgate.db`` in ``data_dir``, as an absolute path so
        that it does not depend on the working directory. URLs naming no driver get the async
        one the gateway ships with (``postgresql://`` -> ``postgresql+asyncpg://``,
        ``sqlite://`` -> ``sqlite+aiosqlite://``); any other URL is used as given.
        """
        if not self.database_url:
            path = (self.data_dir.expanduser().absolute() / "respgate.db").as_posix()
            return f"sqlite+aiosqlite:///{path}"
        scheme, sep, rest = self.database_url.partition("://")
        driver = _ASYNC_DRIVERS.get(scheme.lower())
        return f"{driver}{sep}{rest}" if driver is not None and sep else self.database_url

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_file = _CONFIG_FILE.get("path")
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)


_ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
}

# The TOML path is chosen at run time (``--config``), so it is handed to the source through this
# small holder rather than through a class attribute that would leak between tests.
_CONFIG_FILE: dict[str, Path | None] = {"path": None}


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from an optional TOML file, the environment and explicit overrides."""
    if config_file is not None and not config_file.is_file():
        raise FileNotFoundError(f"config file not found: {config_file}")
    _CONFIG_FILE["path"] = config_file
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    finally:
        _CONFIG_FILE["path"] = None


def get_settings() -> Settings:
    """Settings from the environment alone (no TOML file)."""
    return load_settings()
