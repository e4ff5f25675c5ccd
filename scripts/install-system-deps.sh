#!/usr/bin/env bash
# Debian packages the harness and its tests use. Needs root; idempotent.
# fio (file/block devices), bcc + bpftrace (eBPF capture), kernel headers (bcc compiles at run
# time), smartmontools + nvme-cli (wear counters), QEMU (emulated NVMe guest), busybox-static
# (guest initramfs), chromium (report rendering test), util-linux/e2fsprogs (loop devices,
# filesystem signatures for the safety tests; mkfs.ext4 for the fs layout), xfsprogs + f2fs-tools
# (mkfs.xfs, mkfs.f2fs: the fs layout's file systems), python3-venv (`make` creates .venv), xz-utils
# (build-guest decompresses .ko.xz modules), kmod (build-guest reads the modules' dependencies
# with modinfo), gcc + libc6-dev (build-guest compiles kvwear-dw statically).
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "install-system-deps: not root, skipping Debian packages" >&2
  exit 0
fi
pkgs=(fio bpfcc-tools python3-bpfcc bpftrace linux-headers-amd64 smartmontools nvme-cli
      qemu-system-x86 qemu-utils busybox-static chromium util-linux e2fsprogs xfsprogs f2fs-tools cpio lz4 zstd
      python3-venv xz-utils kmod gcc libc6-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-system-deps: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian 12's QEMU 7.2 has no NVMe FDP: the FDP guest tests use Debian's backports QEMU 10,
# unpacked into a private prefix (never replaces the system QEMU; skips with its reason).
bash "$(dirname "$0")/fetch-qemu-fdp.sh"
