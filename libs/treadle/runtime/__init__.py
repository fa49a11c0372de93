"""The worker kit: settings, consumers and pulls, leases and partitions, mailboxes, clock, metrics, logs, the
command sender and the worker loop. Operator tools live in ``treadle.ops``."""
