"""Operator tools: local servers and process supervision (`treadle up`), broker credentials, API tokens,
tenant policies, tenant consumers and the audit log of who changed what. Workers use the worker kit in
``treadle.runtime``; this package sits above it and is never imported by it."""
