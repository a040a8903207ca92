"""Names of the attributes looptrace puts on spans and metric points."""

PATH = "looptrace.path"  # the section's full dotted path, e.g. root.training.forward
STEP = "looptrace.step"  # lap index of the outermost running timer
DEVICE = "looptrace.device"  # True on spans timed by device events
SPAN_NAME = "span.name"  # the last path segment, as the OpenTelemetry span-metrics name it
THREAD_ID = "thread.id"  # threading.get_ident() of the thread that timed the section
THREAD_NAME = "thread.name"  # its name, e.g. MainThread
# On the span of a never-lapped timer's section, the root of its step's trace: that timer's
# path. Its step has no span of its own (it would repeat the section's); the span-file
# reader gives it back.
STEP_OF = "looptrace.step_of"
SLOW_LAP = "looptrace.slow_lap"  # on a lap traced for its slowness: its time over the median
# On a traced lap's span, the memory when it ended, in bytes: the process's peak resident
# memory so far, and the CUDA allocator's peak allocated so far in the lap's window.
HOST_PEAK_RSS = "looptrace.memory.host_peak_rss"
DEVICE_PEAK_ALLOCATED = "looptrace.memory.device_peak_allocated"
