"""Front ends for other APIs over the Responses kernel: pure translations of another API's
requests into a Responses request (a ``ParsedRequest`` for ``ResponsesService``) and of the
Responses results and events back. No HTTP here: ``app.api.routes`` serves them."""
