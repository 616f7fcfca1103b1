"""The time model: pure functions, no I/O. Each formula cites its source."""
