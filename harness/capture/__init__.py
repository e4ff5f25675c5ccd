"""eBPF block tracers (bcc, bpftrace, auto) behind one interface; see kvwear.harness.capture.base."""

from kvwear.harness.capture.base import TRACERS, CaptureResult, Tracer, TracerUnavailable, kernel_dev_t, open_tracer

__all__ = ["TRACERS", "CaptureResult", "Tracer", "TracerUnavailable", "kernel_dev_t", "open_tracer"]
