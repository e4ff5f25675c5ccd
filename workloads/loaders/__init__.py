"""Trace loaders: one module per format, registered by name in `LOADERS`.

Public entry points (see `pipeline`): `load_requests(path, fmt=None, *, skip_bad=False)` →
`LoadResult`, `convert_trace(path, out_parquet, fmt=None, *, skip_bad=False)` → `ConvertResult`,
`detect_format(path)`, `stream_requests(path, fmt=None, ...)` → `StreamedRequests` (bounded
batches, as often as needed). Formats: mooncake, qwen-bailian, weka (file or directory), aiperf.
This package must not import policies, harness or reports.
"""

from kvwear.workloads.loaders.base import LOADERS, SkipLog, TraceLoader
from kvwear.workloads.loaders.chain import ChainChecker, ChainViolation
from kvwear.workloads.loaders.pipeline import (
    KEYS_DERIVED,
    KEYS_VERIFIED,
    ConvertResult,
    LoadResult,
    StreamedRequests,
    convert_trace,
    detect_format,
    load_requests,
    resolve_format,
    stream_requests,
)

__all__ = [
    "KEYS_DERIVED",
    "KEYS_VERIFIED",
    "LOADERS",
    "ChainChecker",
    "ChainViolation",
    "ConvertResult",
    "LoadResult",
    "SkipLog",
    "StreamedRequests",
    "TraceLoader",
    "convert_trace",
    "detect_format",
    "load_requests",
    "resolve_format",
    "stream_requests",
]
