"""Real REST servers for the ``rest`` engine's tests: json-server (a stateful JSON API) and Prism
(an OpenAPI mock server), both npm packages, each pinned in a folder of its own
(``json_server/``, ``prism/``: package.json and package-lock.json; ``npm ci`` installs them
into node_modules, git-ignored). ``scripts/provision`` installs them before the tests; the
helpers here do it when node_modules is missing (``tests/npm.py``). ``petstore.yaml`` is the
OpenAPI document the tests serve with Prism."""
