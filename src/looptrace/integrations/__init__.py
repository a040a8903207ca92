"""Integrations with training frameworks, profilers and experiment loggers.

Each module imports its host framework when it is imported itself, never before; install the
matching extra (`looptrace[lightning]`, `looptrace[transformers]`, `looptrace[loggers]`, or all
of them with `looptrace[integrations]`):

- `looptrace.integrations.lightning`: `LooptraceProfiler` and `LooptraceCallback`.
- `looptrace.integrations.transformers`: `LooptraceCallback` for the Hugging Face `Trainer`.
- `looptrace.integrations.profiler`: sections as torch.profiler and NVTX (Nsight) ranges.
- `looptrace.integrations.mlflow`, `.wandb`, `.tensorboard`: logging snapshots, and linking
  traces to MLflow runs.
"""
