"""The `auto` tracer: bcc when it imports and compiles here, else bpftrace, saying which ran.

It must not hide why a tracer was skipped: `fallback_reason` keeps bcc's message, and when
neither can run the error carries both messages (not root, no BPF/BTF, no headers, no tracefs).
"""

from __future__ import annotations

from pathlib import Path

from kvwear.harness.capture.base import TRACERS, CaptureResult, Tracer, TracerUnavailable


class AutoTracer:
    name = "auto"

    def __init__(self, order: tuple[str, ...] = ("bcc", "bpftrace"),
                 tracers: dict[str, Tracer] | None = None, **options: float | int) -> None:
        self.order = order
        self._given = tracers or {}
        self._options = options             # buffer sizing, handed to the tracer it opens
        self.active: Tracer | None = None
        self.fallback_reason: str | None = None

    def start(self, dev: int, out_path: Path) -> None:
        reasons = []
        for name in self.order:
            tracer = self._given.get(name) or TRACERS.get(name)(**self._options)
            try:
                tracer.start(dev, out_path)
            except TracerUnavailable as exc:
                reasons.append(str(exc))
                continue
            self.active = tracer
            self.fallback_reason = "; ".join(reasons) or None
            return
        raise TracerUnavailable("no block tracer can run here:\n  " + "\n  ".join(reasons))

    def stop(self) -> CaptureResult:
        assert self.active is not None, "stop() before a successful start()"
        res = self.active.stop()
        if self.fallback_reason:
            res = CaptureResult(**{**res.__dict__, "extra": {**res.extra, "fallback_reason": self.fallback_reason}})
        return res


TRACERS.add("auto", AutoTracer)
