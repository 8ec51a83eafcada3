"""The ``file_search`` tool kind: search the request's vector stores between inference rounds.

- ``provider``: ``FileSearchToolProvider``, a request's ``file_search`` tools as function
  tools (checked: the stores exist, the filters parse), and the lowering of history items;
- ``executor``: ``FileSearchExecutor``, one call, the passages the model reads, the file
  citations, and ``VectorStoreSearch`` (what file search needs of the vector stores).
"""
