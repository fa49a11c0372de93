"""Signed webhooks (docs/webhooks.md): endpoints a tenant registers, what matches them, where Treadle may
send, and the delivery records. The delivery worker is ``services/treadle/deliveries``."""
