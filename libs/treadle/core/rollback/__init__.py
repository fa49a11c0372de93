"""Rollbacks of a thread to a run and of a node to a checkpoint."""
