"""Files and vector stores: one feature package (the Files and Vector Stores APIs, file search).

- ``ports``: the stored records and the interfaces the feature depends on (``FileStores`` and
  ``VectorIndexes``, used through one tenant's view, ``FileStore`` and ``VectorIndex``;
  ``BlobStore``, ``Embedder``); their adapters live with the other storage in ``app.store``
  (``files_sql``, ``blobs``, ``vector_index``). Every service call names the caller's tenant.
- ``files``: the Files API (``FilesService``).
- ``vector_stores``: the Vector Stores API, one service per concept over a shared ``catalog``
  (records, lock, clock): ``stores``, ``store_files``, ``batches``, ``search``; ``attach``
  attaches files and records their ingestion, ``ingest`` runs it (extract -> chunk -> embed
  -> index) in the background.
- ``requests``: the request bodies (pydantic models); ``wire``: the OpenAI objects answered;
  ``checks``: the 404 and the field-naming 400s; ``paging``: ``after``/``before`` pages.
- ``extract``, ``chunking``, ``embeddings`` (+ ``embedder_messages``), ``filters``, ``fusion``
  (scores and reciprocal-rank fusion, shared by the indexes), ``params`` (OpenAI-style
  parameter errors).

No web framework here (``app.api`` is the HTTP boundary), no settings (``app.main`` builds the
embedder from them). Import the submodules themselves: this package imports nothing, so the
gateway does not pay for tiktoken or numpy until file search is used.
"""
