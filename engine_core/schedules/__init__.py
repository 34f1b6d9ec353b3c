"""Schedules: cron and interval times, the scheduler loop that fires them once across the
fleet, and the engine's schedule operations."""
