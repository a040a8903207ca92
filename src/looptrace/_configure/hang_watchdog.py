"""Start the hang watchdog of a configured `Looptrace`, writing into its snapshot file."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path

from looptrace._configure.sinks import Sinks
from looptrace._core.engine import Engine
from looptrace._distributed.ranks import RankInfo
from looptrace._export.hang_policy import HangPolicy
from looptrace._export.open_ages import OpenAges
from looptrace._export.outputs import Outputs
from looptrace._export.stacks import StackAlarm
from looptrace._export.watchdog import Watchdog
from looptrace._looptrace import Looptrace
from looptrace._stats.health import Incidents
from looptrace._stats.roles import Roles


def engine_of(lt: Looptrace) -> Callable[[], Engine | None]:
    """Return the engine of `lt` while it lives, through a weak reference to `lt`.

    The watchdog's thread and the gauges must not keep the handle alive; the compiled engine
    takes no weak reference, the handle does.
    """
    ref = weakref.ref(lt)

    def engine() -> Engine | None:
        target = ref()
        return None if target is None else target._engine

    return engine


def serve_open_gauges(lt: Looptrace, sinks: Sinks) -> Callable[[], object] | None:
    """Serve the open steps' and sections' ages wherever metrics go; return how to push them.

    The Prometheus endpoint reads them at each scrape; OTLP metrics carry them at each push,
    and the returned function (None: no OTLP push) asks for one, which the watchdog does when
    it reports a hang (no window closes while a step hangs).
    """
    pipeline = sinks.pipeline
    if pipeline is None:
        return None
    ages = OpenAges(engine_of(lt), dict(pipeline.histograms.attributes))
    pipeline.histograms.open_gauges = ages.otlp
    if pipeline.prometheus is not None:
        from looptrace._export.open_gauges import OpenSectionsCollector  # noqa: PLC0415 - extra
        from looptrace._export.prometheus import label  # noqa: PLC0415

        pipeline.prometheus.registry.register(OpenSectionsCollector(ages, label))
    return None if pipeline.pusher is None else pipeline.pusher.request


def start_watchdog(
    lt: Looptrace,
    *,
    sinks: Sinks,
    rank: RankInfo,
    incidents: Incidents,
    outputs: Outputs,
    after_s: float,
    factor: float,
    real_clock: bool = True,
    push: Callable[[], object] | None = None,
) -> Watchdog | None:
    """Start the watchdog (None: `after_s` is 0, off); shutdown stops it before the last window.

    It repeats its short line every `after_s` seconds while a step stays hung, and arms the
    stacks alarm to write into the snapshot file's name with `.stacks` added (else standard
    error) when the engine's clock is the real one (`real_clock`): the alarm fires in real time.
    """
    if after_s <= 0:
        return None
    snapshots = sinks.files.snapshots
    stacks = None if snapshots is None else Path(f"{snapshots.path}.stacks")
    watchdog = Watchdog(
        engine_of(lt),
        HangPolicy(factor=factor, floor_s=after_s, repeat_s=after_s),
        rank=rank,
        incidents=incidents,
        roles=_roles_of(weakref.ref(lt)),
        write_line=None if snapshots is None else snapshots.write_record,
        alarm=StackAlarm(stacks, enabled=real_clock),
        push=push,
    )
    outputs.on_close.append(watchdog.stop)
    outputs.standing_hang = watchdog.standing_hang
    watchdog.start()
    return watchdog


def _roles_of(ref: weakref.ref[Looptrace]) -> Callable[[], Roles]:
    """Return the roles of the `Looptrace` referred to (the defaults once it is gone).

    A weak reference: the watchdog's thread must not keep the handle alive.
    """

    def roles() -> Roles:
        lt = ref()
        return Roles() if lt is None else lt._roles()

    return roles
