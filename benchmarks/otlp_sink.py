"""The OTLP/gRPC receiver of benchmarks/bench.py's timed cases, run in a child process.

In the benchmark's own process the receiver's protobuf decoding and gRPC threads would count
as the exporting case's CPU (`time.process_time_ns()`) and compete with it for the GIL; a
collector is not part of a training process either. Run as a script, this starts
`OtlpReceiver("grpc", keep_spans=False)` on 127.0.0.1, prints its port (one line) and serves
until stdin closes or it is terminated.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class ChildReceiver:
    """An OTLP/gRPC receiver in a child process: `endpoint` as `OtlpReceiver.endpoint` has it."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError(f"the OTLP receiver's child process did not start: {line!r}")
        self.port = int(line)

    @property
    def endpoint(self) -> str:
        """Return the URL to configure the exporter with."""
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop the child process and wait for it."""
        self._process.terminate()
        self._process.wait(timeout=10)
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> ChildReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve() -> None:
    """Start the receiver, print its port, serve until stdin closes."""
    sys.path.insert(0, str(ROOT))  # tests/helpers/otlp_server.py
    from tests.helpers.otlp_server import OtlpReceiver

    receiver = OtlpReceiver("grpc", keep_spans=False).start()
    print(receiver.port, flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the benchmark reports it
        pass
    finally:
        receiver.stop()


if __name__ == "__main__":
    serve()
