"""Lineage: forks, context transfers, handoffs, merge-back, start context and summaries."""
