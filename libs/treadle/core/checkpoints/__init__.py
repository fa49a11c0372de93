"""Workspace checkpoints and child scopes."""
