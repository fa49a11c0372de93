"""Schedules, pure: cron expressions, when a schedule fires next in its time zone, and what to do after downtime."""
