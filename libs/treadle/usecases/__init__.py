"""What the HTTP routes and the MCP tools both do: send, create, interrupt, answer, fork, implement, delegate,
and the reads they share. Pure of HTTP: the caller (its tenant and user) and the ports (``ports``) come in as
arguments, refusals are ``core.errors.DomainError``s (the gateway answers them as typed 4xx, the tools as typed
``is_error`` results), and the answers are the contract's types (``treadle.api``)."""
