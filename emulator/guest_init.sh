#!/bin/sh
# kvwear guest /init (busybox sh). Packed into the initramfs by scripts/build-guest.sh.
#
# Protocol (host side: emulator/guest.py). IN: the host appends a cpio archive with /job/job.env
# (shell variables), /job/job.fio (a fio job file) and the files it names (the iolog), or instead
# /job/segments.txt with per-segment job files and trim lists, or /job/dw.plan, a plan that
# kvwear's directive-write tool /bin/kvwear-dw replays with NVMe passthrough (placement handles in
# each write's directive; emulator/kvwear_dw.c, harness/devices/directive_plan.py), or /job/fs.plan,
# a file plan that kvwear's file player /bin/kvwear-fs plays on a file system made and mounted here
# (emulator/kvwear_fs.c, harness/devices/guest_files.py) (see below). OUT: on the
# second serial port (/dev/ttyS1, a file on the host), lines
#   KVWEAR-EVENT <name> <value>
#   KVWEAR-BEGIN <name> <byte length> <sha256>   / base64 lines /   KVWEAR-END <name>
# so the host can tell a complete result from a truncated or garbled one. The console (ttyS0)
# only carries the kernel's messages and this script's progress, for people reading logs.
# This script must not decide anything about the results: it runs the commands, records their
# exit codes and hands every output back verbatim.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /out /tmp

R=/dev/ttyS1
stty -F "$R" raw -echo 2>/dev/null
exec 3>"$R"
event() { echo "KVWEAR-EVENT $1 $2" >&3; }
emit() {  # emit NAME FILE
  len=$(wc -c < "$2")
  sum=$(sha256sum "$2" | cut -d' ' -f1)
  echo "KVWEAR-BEGIN $1 $len $sum" >&3
  base64 "$2" >&3
  echo "KVWEAR-END $1" >&3
}
finish() {
  for f in /out/*; do [ -f "$f" ] && emit "$(basename "$f")" "$f"; done
  event done "$(cut -d' ' -f1 /proc/uptime)"
  exec 3>&-
  sync
  poweroff -f
}
rc() { echo "$1 $2" >> /out/rc.txt; }   # rc NAME STATUS

event init "$(cut -d' ' -f1 /proc/uptime)"
event protocol 4     # 2: segments.txt (deferred trims); 3: dw.plan (kvwear-dw), FDP logs; 4: fs.plan
event kernel "$(uname -r)"
# insmod (unlike modprobe) does not read module options from the kernel command line: pass the
# `module.param=value` words (nvme_core.io_timeout=…) to the module they name ourselves.
load_modules() {  # load_modules LIST-FILE: its modules, in its order
  while read -r m; do
    prefix="$(echo "$m" | tr - _)."
    params=""
    for a in $(cat /proc/cmdline); do
      case "$(echo "${a%%=*}" | tr - _)" in "$prefix"*) params="$params ${a#*.}" ;; esac
    done
    # shellcheck disable=SC2086  # one word per option
    insmod "/lib/modules/$m.ko" $params 2>>/out/insmod.txt
    rc "insmod:$m" $?
  done < "$1"
}
load_modules /lib/modules/load-order
# The file systems' modules only for a job that makes one (1.4 s of a TCG boot).
[ -f /job/fs.plan ] && load_modules /lib/modules/load-order-fs
event nvme-params "io_timeout=$(cat /sys/module/nvme_core/parameters/io_timeout 2>/dev/null)"

# The emulated drive: the only NVMe controller in the guest.
i=0
while [ ! -b /dev/nvme0n1 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
if [ ! -b /dev/nvme0n1 ]; then
  event error "no-nvme-namespace"
  dmesg > /out/dmesg.txt
  finish
fi
event serial "$(tr -d ' \n' < /sys/class/nvme/nvme0/serial)"
event ready "$(cut -d' ' -f1 /proc/uptime)"

[ -f /job/job.env ] && . /job/job.env

snapshot() {  # snapshot PHASE
  nvme smart-log /dev/nvme0 -o json > "/out/smart-$1.json" 2>>/out/stderr.txt; rc "smart-json-$1" $?
  nvme smart-log /dev/nvme0 -o binary > "/out/smart-$1.bin" 2>>/out/stderr.txt; rc "smart-binary-$1" $?
  smartctl -j -a /dev/nvme0 > "/out/smartctl-$1.json" 2>>/out/stderr.txt; rc "smartctl-$1" $?
  # Newer FEMU's stats log (C0h); other controllers refuse or answer with their own layout.
  nvme get-log /dev/nvme0 --log-id=0xc0 --log-len=512 -b > "/out/femu-stats-$1.bin" 2>>/out/stderr.txt
  rc "femu-stats-$1" $?
  # FDP drives (KVWEAR_FDP=1 in job.env): the FDP statistics log (22h) of the endurance group,
  # and the namespace's reclaim unit handle status (RUAMW per placement identifier).
  if [ "${KVWEAR_FDP:-0}" = 1 ]; then
    nvme fdp stats /dev/nvme0 --endgrp-id="${KVWEAR_ENDGID:-1}" -o binary > "/out/fdp-stats-$1.bin" \
      2>>/out/stderr.txt; rc "fdp-stats-$1" $?
    nvme fdp status /dev/nvme0n1 -o binary > "/out/ruh-status-$1.bin" 2>>/out/stderr.txt
    rc "ruh-status-$1" $?
  fi
}

nvme id-ctrl /dev/nvme0 -o json > /out/id-ctrl.json 2>>/out/stderr.txt; rc id-ctrl $?
nvme id-ns /dev/nvme0n1 -o json > /out/id-ns.json 2>>/out/stderr.txt; rc id-ns $?
if [ -f /job/precondition.fio ]; then
  (cd /job && fio --output-format=json --output=/out/precondition.json precondition.fio) 2>>/out/fio-stderr.txt
  rc precondition $?
fi
STAT=/sys/block/nvme0n1/stat
if [ -f /job/fs.plan ]; then
  # The file system is made after any precondition fill and before the first SMART snapshot, and
  # the device's own counters are read around mkfs, so what making it wrote is counted apart from
  # the replay's writes. job.env gives KVWEAR_MKFS (the command, without the device), KVWEAR_FS
  # (the type to mount) and KVWEAR_MOUNT_OPTIONS.
  "${KVWEAR_MKFS%% *}" -V > /out/mkfs-version.txt 2>&1
  cat "$STAT" > /out/stat-mkfs-before.txt
  # shellcheck disable=SC2086  # the command's words
  $KVWEAR_MKFS /dev/nvme0n1 > /out/mkfs.txt 2>&1; rc mkfs $?
  sync
  cat "$STAT" > /out/stat-mkfs-after.txt
fi
snapshot before
if [ -f /job/segments.txt ]; then
  # Deferred trims (the guest's fio drops iolog trims): /job/segments.txt has lines
  # "K HAS_OPS HAS_TRIMS START_S"; per segment fio plays seg-K.fio, then every "offset length" line
  # of trims-K.txt becomes one blkdiscard. stdin of both is /dev/null: the loops read the lists.
  # With KVWEAR_TIMED=1 (job.env) a segment waits until START_S seconds after the first one began.
  t0="$(cut -d' ' -f1 /proc/uptime)"
  event fio-start "$t0"
  while read -r k ops trims start; do
    if [ "${KVWEAR_TIMED:-0}" = 1 ]; then
      w="$(awk -v t0="$t0" -v s="$start" '{ w = t0 + s - $1; printf "%.3f", (w > 0 ? w : 0) }' /proc/uptime)"
      [ "$w" = 0.000 ] || sleep "$w"
    fi
    if [ "$ops" = 1 ]; then
      (cd /job && fio --output-format=json --output="/out/fio-$k.json" "seg-$k.fio") </dev/null 2>>/out/fio-stderr.txt
      rc "fio-$k" $?
    fi
    if [ "$trims" = 1 ]; then
      st=0
      while read -r off len; do
        blkdiscard -o "$off" -l "$len" /dev/nvme0n1 </dev/null 2>>/out/stderr.txt || { st=$?; break; }
      done < "/job/trims-$k.txt"
      rc "discard-$k" $st
    fi
  done < /job/segments.txt
  event fio-end "$(cut -d' ' -f1 /proc/uptime)"
elif [ -f /job/dw.plan ]; then
  # kvwear-dw plays the whole plan (writes with or without placement directives, reads, trims)
  # and prints its byte counts as JSON.
  event fio-start "$(cut -d' ' -f1 /proc/uptime)"
  kvwear-dw /dev/nvme0n1 /job/dw.plan > /out/dw.json 2>>/out/dw-stderr.txt
  rc kvwear-dw $?
  event fio-end "$(cut -d' ' -f1 /proc/uptime)"
elif [ -f /job/fs.plan ]; then
  # The counters are read before the mount and after the unmount: the replay's block bytes are
  # everything the file system wrote for it, the unmount's writeback included. The store's
  # directory is local_disk, as the host's player makes it.
  event fio-start "$(cut -d' ' -f1 /proc/uptime)"
  cat "$STAT" > /out/stat-before.txt
  mkdir -p /mnt/kvwear
  mount -t "$KVWEAR_FS" -o "$KVWEAR_MOUNT_OPTIONS" /dev/nvme0n1 /mnt/kvwear 2>>/out/mount.txt
  st=$?
  rc mount $st
  if [ $st = 0 ]; then
    mkdir /mnt/kvwear/local_disk
    kvwear-fs /mnt/kvwear/local_disk /job/fs.plan > /out/fs.json 2>>/out/fs-stderr.txt
    rc kvwear-fs $?
    umount /mnt/kvwear 2>>/out/mount.txt
    rc umount $?
  fi
  cat "$STAT" > /out/stat-after.txt
  event fio-end "$(cut -d' ' -f1 /proc/uptime)"
elif [ -f /job/job.fio ]; then
  event fio-start "$(cut -d' ' -f1 /proc/uptime)"
  (cd /job && fio --output-format=json --output=/out/fio.json job.fio) 2>>/out/fio-stderr.txt
  rc fio $?
  event fio-end "$(cut -d' ' -f1 /proc/uptime)"
fi
snapshot after
dmesg > /out/dmesg.txt
finish
