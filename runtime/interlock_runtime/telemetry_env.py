"""The OpenTelemetry SDK from the standard OTEL_* environment variables
(docs/observability.md#configuring).

Who calls it is the rule: `interlock worker` and the CLI verbs that start or signal a
workflow are the application, so they call configure_from_env() before anything else; a
library client (Runtime, AsyncRuntime) never does, since a library must not install global
providers behind its application's back: the application calls it, or sets its own SDK.

The variables follow the Python SDK's own auto-configuration: OTEL_TRACES_EXPORTER and
OTEL_METRICS_EXPORTER name exporters by their entry points (a comma list; `none` or unset:
nothing), `otlp` is the gRPC one unless OTEL_EXPORTER_OTLP[_TRACES|_METRICS]_PROTOCOL says
http/protobuf, the exporters read their own OTEL_EXPORTER_OTLP_* settings, the resource reads
OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, the batch span processor and the periodic
metric reader their OTEL_BSP_* and OTEL_METRIC_EXPORT_* ones, the provider OTEL_TRACES_SAMPLER;
OTEL_SDK_DISABLED=true turns all of it off. A signal whose global provider was set before (by
the application, or `opentelemetry-instrument`) is left alone.

Nothing here imports opentelemetry unless an exporter is asked for; then a missing package is
ExporterUnavailable (an InvalidInput: the CLI prints its one line and exits 2), naming what to
install, and no provider is set for any signal.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from typing import Any

from . import telemetry
from .errors import InvalidInput

SIGNALS = ("traces", "metrics")
_VARIABLE = {"traces": "OTEL_TRACES_EXPORTER", "metrics": "OTEL_METRICS_EXPORTER"}
_UNSET = ("ProxyTracerProvider", "_ProxyMeterProvider")  # the API's own, before any is set
_OTLP = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}  # the SDK's choice

# The package that registers each well-known exporter name (its entry point).
PACKAGES = {
    "console": "opentelemetry-sdk",
    "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
    "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http",
    "zipkin_json": "opentelemetry-exporter-zipkin-json",
    "zipkin_proto": "opentelemetry-exporter-zipkin-proto-http",
    "prometheus": "opentelemetry-exporter-prometheus",
}
SDK_HINT = "pip install 'interlock-runtime[otel-sdk]'"


class ExporterUnavailable(InvalidInput):
    """OTEL_*_EXPORTER asks for an exporter this environment cannot make (the SDK or the
    exporter's package is not installed, or the OTLP protocol is unknown). The message names
    the variable and what to install; nothing was configured."""


def exporter_names(signal: str) -> list[str]:
    """The exporters OTEL_<SIGNAL>_EXPORTER asks for; [] for unset, empty or `none`."""
    raw = os.environ.get(_VARIABLE[signal], "")
    return [n.strip() for n in raw.split(",") if n.strip() and n.strip().lower() != "none"]


def _otlp(name: str, signal: str) -> str:
    """`otlp` as the entry point the SDK picks for the configured protocol."""
    if name != "otlp":
        return name
    variable = next((v for v in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL",
                                 "OTEL_EXPORTER_OTLP_PROTOCOL") if os.environ.get(v)), "")  # fmt: skip
    protocol = os.environ.get(variable, "grpc").strip() if variable else "grpc"  # the SDK's default
    if protocol not in _OTLP:
        raise ExporterUnavailable(
            f"{variable}={protocol!r} is not a protocol the Python OTLP exporters speak; set it "
            "to grpc or http/protobuf"
        )
    return _OTLP[protocol]


def wanted() -> dict[str, list[str]]:
    """Per signal, the exporters the environment asks for ({} when OTEL_SDK_DISABLED)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return {}
    return {signal: names for signal in SIGNALS if (names := exporter_names(signal))}


def configure_from_env(service: str | None = None) -> tuple[str, ...]:
    """Set the global tracer and meter providers from the OTEL_* variables, for each signal
    that names an exporter and has no provider yet; `service` is service.name when neither
    OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES gives one. Returns the signals it set
    (the SDK flushes them at exit). Raises ExporterUnavailable, having set nothing, when an
    exporter asked for cannot be made. Call it before making a Worker, or anywhere in an
    application that wants the environment to decide (telemetry.setup() is looked at again)."""
    asked = wanted()
    if not asked:
        return ()
    if not telemetry.ENABLED:
        variable = _VARIABLE[next(iter(asked))]
        raise ExporterUnavailable(
            f"{variable} is set but OpenTelemetry is not installed: {SDK_HINT} (or unset {variable})"
        )
    todo = {signal: [_otlp(name, signal) for name in names]
            for signal, names in asked.items() if not _provider_set(signal)}  # fmt: skip
    if not todo:
        return ()
    sdk = _sdk(next(iter(todo)))
    made = {signal: [_made(signal, name, sdk) for name in names] for signal, names in todo.items()}
    resource = sdk["resources"].Resource.create({})
    if service and str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(sdk["resources"].Resource({"service.name": service}))
    if "traces" in made:
        provider = sdk["trace"].TracerProvider(resource=resource)
        for exporter in made["traces"]:
            provider.add_span_processor(sdk["trace_export"].BatchSpanProcessor(exporter))
        telemetry._trace.set_tracer_provider(provider)
    if "metrics" in made:
        telemetry._metrics.set_meter_provider(
            sdk["metrics"].MeterProvider(resource=resource, metric_readers=made["metrics"])
        )
    telemetry.setup()  # a Worker made before this call makes its spans from now on
    return tuple(made)


def _provider_set(signal: str) -> bool:
    api = telemetry._trace if signal == "traces" else telemetry._metrics
    get = api.get_tracer_provider if signal == "traces" else api.get_meter_provider
    return type(get()).__name__ not in _UNSET


def _sdk(signal: str) -> dict[str, Any]:
    modules = {"trace": "sdk.trace", "trace_export": "sdk.trace.export", "metrics": "sdk.metrics",
               "metrics_export": "sdk.metrics.export", "resources": "sdk.resources"}  # fmt: skip
    try:
        sdk = {k: importlib.import_module(f"opentelemetry.{m}") for k, m in modules.items()}
    except ImportError:
        raise ExporterUnavailable(
            f"{_VARIABLE[signal]} is set but the OpenTelemetry SDK (opentelemetry-sdk) is not "
            f"installed: {SDK_HINT}"
        ) from None
    sdk["reader"] = sdk["metrics_export"].MetricReader
    return sdk


def _made(signal: str, name: str, sdk: dict[str, Any]) -> Any:
    """The exporter registered under `name`, made with its own settings from the environment;
    for metrics, the reader that exports to it (or the reader itself, e.g. prometheus)."""
    group = f"opentelemetry_{signal}_exporter"
    package = PACKAGES.get(name)
    install = (
        f"pip install {package}"
        if package
        else f"install the package that registers {name!r} (entry point group {group})"
    )
    if name == "otlp_proto_grpc":
        install += " (or set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and pip install "
        install += f"{PACKAGES['otlp_proto_http']})"
    asks = f"{_VARIABLE[signal]} asks for the {name!r} {signal} exporter"
    found = [ep for ep in importlib.metadata.entry_points(group=group) if ep.name == name]
    if not found:
        raise ExporterUnavailable(f"{asks}, which is not installed: {install}")
    try:
        made = found[0].load()()
    except ImportError as exc:
        raise ExporterUnavailable(
            f"{asks}, which cannot be loaded (module {exc.name} is missing): {install}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - its settings (OTEL_EXPORTER_*) refused: one line
        raise ExporterUnavailable(f"{asks}, which refused its settings: {exc}") from None
    if signal == "metrics" and not isinstance(made, sdk["reader"]):
        made = sdk["metrics_export"].PeriodicExportingMetricReader(made)
    return made
