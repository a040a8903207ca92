"""The hot path: timers, the lap engine and its data model, clocks, sampling, ids, device events."""
