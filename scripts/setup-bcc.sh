#!/usr/bin/env bash
# Make bcc usable on this host for kvwear's eBPF block tracer. Needs root; idempotent.
#   1. mount tracefs (bcc and bpftrace read tracepoint formats from it);
#   2. link Debian's linux-headers-*-amd64 as /lib/modules/$(uname -r)/build and its -common
#      sibling as .../source when the running kernel has no headers (bcc compiles at run time;
#      tracepoint fields come from tracefs, so a version gap between headers and kernel is fine);
#   3. make bcc's Python module (Debian's python3-bpfcc) importable from the venv with one symlink
#      of the `bcc` package into the venv's site-packages — nothing else from dist-packages leaks in.
# Usage: scripts/setup-bcc.sh [VENV_DIR]   (default .venv; the venv step is skipped if it is absent)
set -euo pipefail
venv="${1:-.venv}"
if [ "$(id -u)" != 0 ]; then
  echo "setup-bcc: not root, skipping (eBPF capture needs root)" >&2
  exit 0
fi

# 1. tracefs
if [ ! -d /sys/kernel/tracing/events ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null \
    || echo "setup-bcc: could not mount tracefs on /sys/kernel/tracing" >&2
fi

# 2. kernel headers
kdir="/lib/modules/$(uname -r)"
if [ ! -e "$kdir/build/include" ]; then
  hdr="$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -n "$hdr" ]; then
    mkdir -p "$kdir"
    ln -sfn "$hdr" "$kdir/build"
    common="${hdr%-amd64}-common"
    [ -d "$common" ] && ln -sfn "$common" "$kdir/source"
    echo "setup-bcc: linked $hdr as $kdir/build" >&2
  else
    echo "setup-bcc: no /usr/src/linux-headers-*-amd64 (install linux-headers-amd64); bcc cannot compile" >&2
  fi
fi

# 3. bcc importable from the venv
src=/usr/lib/python3/dist-packages/bcc
if [ -d "$venv" ] && [ -d "$src" ]; then
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  if [ ! -e "$site/bcc" ]; then
    ln -s "$src" "$site/bcc"
    echo "setup-bcc: linked $src into $site" >&2
  fi
elif [ ! -d "$src" ]; then
  echo "setup-bcc: $src missing (install python3-bpfcc)" >&2
fi
