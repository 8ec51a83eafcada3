"""``create_app(settings)``: the one place where concrete adapters are wired into the core."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from app import __version__
from app.api.errors import install_error_handlers
from app.api.openapi import install_openapi
from app.api.rate_limit import install_rate_limits
from app.api.routes import (
    chat,
    conversations,
    files,
    health,
    messages,
    models,
    responses,
    responses_ws,
    vector_stores,
)
from app.api.server_send import install_server_send
from app.api.state import GatewayState
from app.authentication import install_auth
from app.compaction_key import compaction_codec
from app.core.background import BackgroundOptions, BackgroundResponses
from app.core.compact import Compactor
from app.core.engines import ToolSessionStore
from app.core.jobs import JobStore
from app.core.limits import LoopLimits
from app.core.observe import ToolEvents
from app.core.ports import ResponseStore, Upstream
from app.core.service import ResponsesService
from app.files.embeddings import EmbedderOptions, choose_embedder
from app.files.files import FilesService
from app.files.ingest import IngestOptions
from app.files.ports import Embedder, VectorIndexes
from app.files.vector_stores import VectorStoresService
from app.monitoring import install_metrics
from app.observability import Observability
from app.options.secrets import secret_environ
from app.plugins import load_hooks
from app.protocol.items import register_item_kinds
from app.protocol.json_types import JsonObject
from app.protocol.requests import register_include_values
from app.settings import Settings, UpstreamConfig
from app.store.blobs import DiskBlobStore
from app.store.engine import create_engine_for
from app.store.files_sql import SqlFileStores
from app.store.migrate import prepare_database
from app.store.retention import start_purging
from app.store.signals import open_job_signals
from app.store.sql import SqlResponseStore
from app.store.vector_index.choice import open_vector_index
from app.tool_engines import build_tool_engines
from app.tools.file_search.provider import FileSearchToolProvider, VectorStoreSearch
from app.tools.hosted import HostedToolPolicy, HostedTools
from app.tools.mcp.provider import McpToolProvider
from app.tools.mcp.servers import McpPolicy
from app.tools.toolkit import GatewayToolKit
from app.tools.web_search.backends import create_search_provider
from app.tools.web_search.provider import WebSearchToolProvider
from app.tools.web_search.results import SearchLimits
from app.upstream.chat_request import ChatOptions
from app.upstream.http import HttpOptions
from app.upstream.kinds import UpstreamSpec, create_upstream
from app.upstream.retry import create_guard
from app.upstream.router import UpstreamRoute, UpstreamRouter
from app.upstream.sse import DEFAULT_MAX_EVENT_BYTES

logger = logging.getLogger(__name__)


class UpstreamNotReadyError(RuntimeError):
    """The upstream did not become healthy within ``wait_for_upstream`` seconds."""


async def wait_for_upstream(upstream: Upstream, seconds: float, url: str) -> None:
    deadline = time.monotonic() + seconds
    delay = 0.25
    while not await upstream.check_ready():
        if time.monotonic() >= deadline:
            raise UpstreamNotReadyError(f"upstream {url} not ready after {seconds:g} s")
        logger.info("waiting for upstream %s", url)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)
    logger.info("upstream %s is ready", url)


def create_configured_upstream(
    config: UpstreamConfig, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> Upstream:
    """The ``Upstream`` of one configured upstream, by its kind (``app.upstream.kinds``)."""
    http: HttpOptions = {
        "guard": create_guard(config.name, **config.guard_options()),
        "api_key": config.resolved_api_key(secret_environ()),
        "forward_client_key": config.forward_client_key,
        "connect_timeout": config.connect_timeout,
        "read_timeout": config.read_timeout,
        "name": config.name,
        "max_connections": config.max_connections,
        "pool_wait_warn_seconds": config.pool_wait_warn_seconds,
        "max_event_bytes": max_event_bytes,
    }
    chat = ChatOptions(
        reasoning_history=config.reasoning_history,
        send_reasoning_effort=config.send_reasoning_effort,
        stream_usage=config.stream_usage,
    )
    native = config.native_tool_types
    spec = UpstreamSpec(
        url=config.url,
        chat=chat,
        native_tool_types=frozenset(native) if native is not None else None,
        native_compact=config.native_compact,
        context_window=config.context_window,
    )
    return create_upstream(config.kind, spec, http)


def build_upstream(settings: Settings) -> UpstreamRouter:
    """Every configured upstream behind one router (the default upstream first)."""
    routes = [
        UpstreamRoute(
            name=config.name,
            upstream=create_configured_upstream(config, settings.limits.max_upstream_event_bytes),
            url=config.url,
            models=tuple(config.models),
            model_map=dict(config.model_map),
        )
        for config in settings.resolved_upstreams()
    ]
    return UpstreamRouter(routes)


async def build_store(settings: Settings) -> SqlResponseStore:
    """The SQL store; an embedded SQLite database is created or migrated on the way."""
    url = settings.resolved_database_url()
    await prepare_database(url, auto_migrate=True)
    return SqlResponseStore(create_engine_for(url))


def hosted_tools(settings: Settings, upstream: Upstream | None = None) -> HostedTools:
    """What to do with hosted tools the gateway cannot run: ``hosted_tools``, or the
    ``hosted_tools`` of the ``[[upstreams]]`` entry that serves the request's model."""
    overrides = {u.name: u.hosted_tools for u in settings.resolved_upstreams() if u.hosted_tools}
    if not overrides or not isinstance(upstream, UpstreamRouter):
        return HostedTools(settings.hosted_tools)
    router, default = upstream, settings.hosted_tools

    def policy_for(body: JsonObject) -> HostedToolPolicy:
        return overrides.get(router.route_for(body.get("model")).name, default)

    return HostedTools(default, policy_for)


def default_tool_sets(
    settings: Settings, upstream: Upstream | None = None
) -> Callable[[JsonObject], list[str]]:
    """The tool sets a request gets without naming them: its upstream's ``tool_sets``, else
    ``default_tool_sets``."""
    by_upstream = {u.name: u.tool_sets for u in settings.resolved_upstreams() if u.tool_sets}
    default = list(settings.default_tool_sets)
    if not by_upstream or not isinstance(upstream, UpstreamRouter):
        return lambda body: default
    router = upstream

    def tool_sets_for(body: JsonObject) -> list[str]:
        return by_upstream.get(router.route_for(body.get("model")).name, default)

    return tool_sets_for


def build_toolkit(
    settings: Settings,
    vector_stores: VectorStoreSearch | None = None,
    upstream: Upstream | None = None,
    tool_sessions: ToolSessionStore | None = None,
) -> tuple[GatewayToolKit, contextlib.AsyncExitStack]:
    """The gateway's tool providers, and what closes their resources with the app (the
    configured MCP servers' sessions, the web search provider's HTTP client); ``upstream``
    routes the per-upstream ``hosted_tools``."""
    mcp = settings.mcp
    engines = build_tool_engines(settings, upstream=upstream, store=tool_sessions)
    egress = settings.egress.policy()
    provider = McpToolProvider(
        policy=McpPolicy(egress=egress, connect_timeout=mcp.connect_timeout),
        namespaces=engines.namespaces,
        sessions=engines.sessions,
    )
    resources = contextlib.AsyncExitStack()
    resources.push_async_callback(engines.resources.aclose)
    search = None
    if settings.web_search_provider is not None:
        search = create_search_provider(
            settings.web_search_provider,
            base_url=settings.web_search_base_url,
            api_key=settings.web_search_api_key,
            limits=SearchLimits(
                max_concurrency=settings.web_search_max_concurrency,
                timeout=settings.web_search_timeout,
                fetch_pages=settings.web_search_fetch_pages,
            ),
            egress=egress,
        )
        resources.push_async_callback(search.aclose)
    # Always there: without a provider, web search tools are dropped, refused or forwarded
    # (hosted_tools), and web_search_call items in the history are still lowered.
    web_search = WebSearchToolProvider(search, max_results=settings.web_search_max_results)
    file_search = FileSearchToolProvider(vector_stores)
    kit = GatewayToolKit(
        [provider, web_search, file_search],
        hosted=hosted_tools(settings, upstream),
        default_tools=provider.default_tools(default_tool_sets(settings, upstream)),
    )
    register_tool_kinds(kit)
    return kit, resources


def register_tool_kinds(kit: GatewayToolKit) -> None:
    """Teach the wire layer what the tool kinds add to it: their item types (ids the gateway
    gives, fields it fills) and the ``include`` values they answer."""
    register_item_kinds(kit.item_kinds)
    register_include_values(kit.include_values)


def build_embedder(
    settings: Settings, upstream_url: str | None = None, api_key: str | None = None
) -> Embedder:
    """The embedder the ``embeddings_*`` settings ask for (``app.files.embeddings``);
    ``upstream_url`` and ``api_key`` default to the upstream's settings."""
    options = EmbedderOptions(
        provider=settings.embeddings_provider,
        model=settings.embeddings_model,
        batch_size=settings.embeddings_batch_size,
        upstream_url=upstream_url if upstream_url is not None else settings.upstream_url,
        api_key=api_key if api_key is not None else settings.upstream_api_key,
        connect_timeout=settings.upstream_connect_timeout,
        read_timeout=settings.upstream_read_timeout,
    )
    return choose_embedder(options)


async def build_vector_index(engine: AsyncEngine) -> VectorIndexes:
    """The chunk index in the store's database: SQLite's; on PostgreSQL pgvector's, or the
    exact index in the gateway where pgvector is not there (a log line says which)."""
    return await open_vector_index(engine)


async def build_file_search(
    settings: Settings,
    stack: contextlib.AsyncExitStack,
    embedder: Embedder | None = None,
    *,
    database_ready: bool = False,
) -> tuple[FilesService, VectorStoresService]:
    """Files and vector stores: metadata and chunks in the store's database, bytes under
    ``data_dir/files``. Closed in reverse: ingestion is cancelled before the engine goes.

    Their engine is the store's database but not the store's pool, on purpose: ingestion holds
    connections for whole batches, and the response store's fixed pool is sized for the hot
    path alone. ``database_ready``: ``build_store`` already created or migrated the schema.
    """
    url = settings.resolved_database_url()
    if not database_ready:
        await prepare_database(url, auto_migrate=True)
    engine = create_engine_for(url)
    stack.push_async_callback(engine.dispose)
    if embedder is None:
        default = settings.resolved_upstreams()[0]
        api_key = default.resolved_api_key(secret_environ())
        embedder = build_embedder(settings, default.url, api_key)
        stack.push_async_callback(embedder.aclose)  # an embedder passed in is the caller's
    file_store = SqlFileStores(engine)
    stack.push_async_callback(file_store.aclose)
    blobs = DiskBlobStore(settings.data_dir / "files")
    stack.push_async_callback(blobs.aclose)
    index = await build_vector_index(engine)
    stack.push_async_callback(index.aclose)
    vector_stores = VectorStoresService(
        file_store,
        blobs,
        index,
        embedder,
        time.time,
        ingest=IngestOptions(
            batch_size=settings.embeddings_batch_size, extraction=settings.extraction.limits()
        ),
    )
    stack.push_async_callback(vector_stores.aclose)
    files = FilesService(file_store, blobs, time.time, detacher=vector_stores.store_files)
    await vector_stores.resume_pending()
    return files, vector_stores


def loop_limits(settings: Settings) -> LoopLimits:
    limits = settings.limits
    return LoopLimits(
        max_rounds=settings.tool_max_rounds,
        call_timeout=settings.tool_call_timeout,
        max_concurrency=settings.tool_max_concurrency,
        round_timeout=settings.tool_round_timeout or settings.upstream_read_timeout,
        **limits.loop_limits(),
    )


async def start_background(
    settings: Settings,
    service: ResponsesService,
    store: ResponseStore,
    stack: contextlib.AsyncExitStack,
) -> BackgroundResponses | None:
    """Background responses on the store's job records (None when the store keeps none), with
    the job signals the settings ask for, after taking over the jobs whose process stopped;
    closed by ``stack``."""
    if not isinstance(store, JobStore):
        return None
    options = BackgroundOptions(
        lease_seconds=settings.background_lease_seconds,
        event_retention_seconds=settings.background_event_retention_minutes * 60,
    )
    signals = open_job_signals(
        settings.job_signals, settings.resolved_database_url(), settings.redis_url
    )
    if signals is not None:
        stack.push_async_callback(signals.aclose)
    background = BackgroundResponses(service, store, options, signals=signals)
    stack.push_async_callback(background.aclose)
    await background.start()
    return background


def create_app(
    settings: Settings,
    upstream: Upstream | None = None,
    store: ResponseStore | None = None,
    tool_events: ToolEvents | None = None,
    embedder: Embedder | None = None,
) -> FastAPI:
    """The gateway application. ``upstream`` and ``store`` replace the real adapters in tests;
    ``tool_events`` is the hook gateway tool calls are reported to; ``embedder`` replaces the
    configured embeddings provider (tests)."""
    observability = Observability(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            active_store = store if store is not None else await build_store(settings)
            stack.push_async_callback(active_store.aclose)
            active = upstream if upstream is not None else build_upstream(settings)
            stack.push_async_callback(active.aclose)
            if settings.wait_for_upstream > 0:
                urls = ", ".join(u.url for u in settings.resolved_upstreams())
                await wait_for_upstream(active, settings.wait_for_upstream, urls)
            files_service, vector_stores_service = await build_file_search(
                settings, stack, embedder, database_ready=store is None
            )
            sessions = active_store if isinstance(active_store, ToolSessionStore) else None
            toolkit, tool_resources = build_toolkit(
                settings, vector_stores_service.searcher, active, sessions
            )
            stack.push_async_callback(tool_resources.aclose)
            events = tool_events if tool_events is not None else ToolEvents()
            for _, hook in load_hooks(settings.tool_hooks):
                events.subscribe(hook)
            stack.push_async_callback(events.aclose)
            service = ResponsesService(
                active,
                active_store,
                toolkit=toolkit,
                limits=loop_limits(settings),
                tool_events=events,
            )
            service.compactor = Compactor(active, active_store, compaction_codec(settings))
            observability.attach(service, stack)
            background = await start_background(settings, service, active_store, stack)
            start_purging(active_store, settings.retention.policy(), stack)
            app.state.gateway = GatewayState(
                settings=settings,
                upstream=active,
                store=active_store,
                service=service,
                files=files_service,
                vector_stores=vector_stores_service,
                background=background,
            )
            yield

    app = FastAPI(
        title="respgate",
        version=__version__,
        lifespan=lifespan,
        description="An OpenAI Responses API gateway in front of any inference server.",
        docs_url="/docs",
        redoc_url=None,
        telemetry=observability.fastapi_telemetry,
    )
    install_error_handlers(app)
    # Rate limits per caller: added before the authentication middleware, so they run inside it.
    install_rate_limits(app, settings.limits, settings.redis_url)
    app.router.routes.extend(responses.HOT_ROUTES)
    app.router.routes.extend(responses_ws.ROUTES)
    app.router.routes.extend(chat.ROUTES)
    app.router.routes.extend(messages.ROUTES)
    app.include_router(responses.router)
    app.include_router(conversations.router)
    app.include_router(files.router)
    app.include_router(vector_stores.router)
    app.include_router(models.router)
    app.include_router(health.router)
    install_openapi(app)
    # Last, so outermost: every other middleware (rate limits) runs inside authentication.
    install_auth(app, settings)
    # Outside authentication: /metrics has its own access rule, and refusals are counted too.
    install_metrics(app, settings)
    observability.install(app)  # request ids, around everything
    install_server_send(app)  # outside even that: the server's send, for streamed bodies
    return app
