"""Files and vector stores, one feature package: the Files and Vector Stores APIs, ingestion,
text extraction, chunking, embeddings, attribute filters, search fusion, and their ports
(``ports``; the SQL adapters live in ``app.store``).

Import the submodules themselves (``app.files.extract``, ``.chunking``, ``.embeddings``,
``.filters``): this package imports nothing, so the gateway does not pay for tiktoken or numpy
until file search is used.
"""
