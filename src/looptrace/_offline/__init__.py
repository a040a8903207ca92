"""What the CLI runs on files: readers, summary, table, Perfetto, replay, plots."""
