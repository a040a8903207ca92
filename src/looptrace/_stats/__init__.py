"""Statistics: the sketch, buckets, aggregation, snapshots, spreads, health counters, errors."""
