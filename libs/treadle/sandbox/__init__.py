"""Isolation of tenants where their agents run: identities, the runtime launcher, limits."""
