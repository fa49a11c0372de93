"""The operation ids of schedules (``client/schedules.py``), apart so that ``calls.OPERATIONS`` can list them."""

OPERATIONS: tuple[str, ...] = (
    "create_thread_schedule",
    "create_tenant_schedule",
    "list_thread_schedules",
    "list_tenant_schedules",
    "get_thread_schedule",
    "get_schedule",
    "update_thread_schedule",
    "update_schedule",
    "delete_thread_schedule",
    "delete_schedule",
    "pause_thread_schedule",
    "resume_thread_schedule",
    "pause_schedule",
    "resume_schedule",
)
