"""Runtime requests: approvals and questions."""
