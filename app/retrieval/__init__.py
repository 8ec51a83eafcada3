"""File search: text extraction, chunking, embeddings, attribute filters and vector indexes.

Import the submodules themselves (``app.retrieval.extract``, ``.chunking``, ``.embeddings``,
``.filters``): this package imports nothing, so the gateway does not pay for tiktoken or numpy
until file search is used.
"""
