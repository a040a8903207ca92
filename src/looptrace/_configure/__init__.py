"""`configure()`: choose providers without clobbering the application's, and wire looptrace.

`wire` is `configure()` itself, one step per function: its own settings (`_export.run_settings`),
the clocks, the files and exporters (`outputs`), the providers (`providers`), tracing on the
chosen provider (`tracing`), the engine and the handle.
"""

from looptrace._configure.providers import looptrace_resource
from looptrace._configure.wire import configure

__all__ = ["configure", "looptrace_resource"]
