"""Runs and attempts: the finalization barrier, steering, interrupts, recovery and supervision."""
