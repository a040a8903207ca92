"""Settings and every output: span export, metrics, OTLP, Prometheus, files, exit flush."""
