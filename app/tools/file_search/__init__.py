"""The ``file_search`` tool kind: search the request's vector stores between inference rounds.

``provider`` is the tool provider and its executor.
"""
