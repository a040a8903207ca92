"""Which providers looptrace uses: the one passed, the application's global one, or its own.

looptrace never replaces a provider the application set; the first provider it makes itself
becomes the global one when none is set yet, and a later `configure()` makes its own rather
than join one of looptrace's.
"""

from __future__ import annotations

import os
import socket
import weakref

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.resources import HOST_NAME, SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

from looptrace._distributed.ranks import RankInfo
from looptrace._export.id_generator import StepIdGenerator


def looptrace_resource(service_name: str, rank: RankInfo) -> Resource:
    """Return the Resource of a provider looptrace installs: service, host and rank."""
    return Resource.create(
        {
            SERVICE_NAME: service_name,
            SERVICE_INSTANCE_ID: rank.instance_id,
            HOST_NAME: socket.gethostname(),
            **rank.attributes(),
        }
    )


def tracer_provider_for(
    passed: trace.TracerProvider | None, resource: Resource, rank: RankInfo
) -> trace.TracerProvider:
    """Return the provider spans go to: `passed`, else the application's, else looptrace's own."""
    provider = passed or application_tracer_provider()
    return provider if provider is not None else _own_tracer_provider(resource, rank)


def owns_traces(passed: trace.TracerProvider | None) -> bool:
    """Whether looptrace will make the tracer provider itself (none passed, none global)."""
    return passed is None and application_tracer_provider() is None


# Providers looptrace made: a later configure() makes its own rather than join one of them.
_INSTALLED: weakref.WeakSet[SdkTracerProvider] = weakref.WeakSet()


def _own_tracer_provider(resource: Resource, rank: RankInfo) -> SdkTracerProvider:
    """Make looptrace's provider; the first one made becomes the global provider."""
    # looptrace samples whole steps itself (LapSampler); the SDK keeps what it gets.
    provider = SdkTracerProvider(
        resource=resource, sampler=ParentBased(ALWAYS_ON), id_generator=StepIdGenerator()
    )
    _keep_instance_id_after_fork(provider, rank.instance_id)
    if _global_sdk_tracer_provider() is None:
        trace.set_tracer_provider(provider)
    _INSTALLED.add(provider)
    return provider


def application_tracer_provider() -> SdkTracerProvider | None:
    """Return the global SDK provider when the application set it (not an earlier looptrace)."""
    provider = _global_sdk_tracer_provider()
    return None if provider is None or provider in _INSTALLED else provider


def _global_sdk_tracer_provider() -> SdkTracerProvider | None:
    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, SdkTracerProvider) else None


def global_sdk_meter_provider() -> SdkMeterProvider | None:
    """Return the global meter provider when it is an SDK one."""
    provider = metrics.get_meter_provider()
    return provider if isinstance(provider, SdkMeterProvider) else None


def _keep_instance_id_after_fork(provider: SdkTracerProvider, instance_id: str) -> None:
    """Re-apply looptrace's `service.instance.id` in forked children.

    The SDK replaces it with a random UUID after every fork (its process-dependent resource
    detector); a DataLoader worker must keep reporting as the job's rank that forked it.
    Handlers run in registration order, so this one runs after the provider's own.
    """
    if not hasattr(os, "register_at_fork"):
        return
    ref = weakref.ref(provider)
    pinned = Resource({SERVICE_INSTANCE_ID: instance_id})

    def reapply() -> None:
        target = ref()
        update = getattr(target, "_update_resource", None)
        if update is not None:
            update(pinned)

    os.register_at_fork(after_in_child=reapply)
