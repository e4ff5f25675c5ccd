#!/usr/bin/env bash
# Build the small Linux guest kvwear boots under QEMU/FEMU: a Debian kernel and a busybox
# initramfs holding fio, nvme-cli, smartctl (the host's Debian binaries plus the libraries `ldd`
# lists), the NVMe driver modules, kvwear's /init (emulator/guest_init.sh) and kvwear's
# directive-write tool /bin/kvwear-dw (emulator/kvwear_dw.c, compiled here with gcc -static).
#
#   scripts/build-guest.sh [OUT_DIR]      default: $KVWEAR_GUEST_DIR or ~/.cache/kvwear/guest
#
# Output: OUT_DIR/vmlinuz, OUT_DIR/initrd.img, OUT_DIR/stamp (package versions, /init and
# kvwear-dw source hashes; emulator.guest refuses an image whose kvwear-dw line is stale).
# Idempotent: rebuilds only when the stamp changes. Network: only Debian's package mirrors
# (`apt-get download linux-image-…`; the kernel is extracted with dpkg-deb -x, never installed).
# Needs: apt-get, dpkg-deb, busybox-static, fio, nvme-cli, smartmontools, zstd or gzip, xz-utils,
# gcc with the static C library (libc6-dev) (scripts/install-system-deps.sh installs them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
out="${1:-${KVWEAR_GUEST_DIR:-$HOME/.cache/kvwear/guest}}"
init_src="$repo/emulator/guest_init.sh"
dw_src="$repo/emulator/kvwear_dw.c"
# Load order matters: each module needs the ones before it (modinfo depends of the 6.1 kernel).
modules=(crct10dif_common crct10dif_generic crc-t10dif crc64 crc64_rocksoft_generic crc64-rocksoft
         t10-pi nvme-core nvme)

die() { echo "build-guest: $*" >&2; exit 1; }
for tool in apt-get apt-cache dpkg-deb dpkg-query sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found (this script needs a Debian system)"
done
busybox=/bin/busybox
[ -x "$busybox" ] || die "busybox-static not installed"
ldd "$busybox" >/dev/null 2>&1 && die "$busybox is dynamically linked: install busybox-static"
declare -A bins=([fio]="" [nvme]="" [smartctl]="")
for b in "${!bins[@]}"; do
  bins[$b]="$(command -v "$b" || true)"
  [ -n "${bins[$b]}" ] || die "$b not found: run scripts/install-system-deps.sh (packages fio nvme-cli smartmontools)"
done
[ -f "$init_src" ] || die "$init_src missing"
[ -f "$dw_src" ] || die "$dw_src missing"
command -v gcc >/dev/null || die "gcc not found: install gcc and libc6-dev (kvwear-dw is compiled statically)"
if command -v zstd >/dev/null; then compress=(zstd -q -T0 -10); else compress=(gzip -6); fi

# The kernel package the metapackage points at (e.g. linux-image-6.1.0-57-amd64 (= 6.1.192-3)).
kpkg_of() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
kpkg="$(kpkg_of)"
if [ -z "$kpkg" ] && [ "$(id -u)" = 0 ]; then   # a fresh machine may have no package lists yet
  apt-get update -qq >/dev/null 2>&1 || true
  kpkg="$(kpkg_of)"
fi
[ -n "$kpkg" ] || die "apt-cache knows no linux-image-amd64: run 'apt-get update' (Debian mirrors)"
kver="$(apt-cache policy "$kpkg" | awk '/Candidate:/{print $2}')"
pkgver() { dpkg-query -W -f='${Package}=${Version}' "$1" 2>/dev/null || echo "$1=?"; }
stamp="$(printf '%s\n' "kernel $kpkg=$kver" "$(pkgver busybox-static)" "$(pkgver fio)" "$(pkgver nvme-cli)" \
  "$(pkgver smartmontools)" "init $(sha256sum "$init_src" | cut -c1-16)" \
  "kvwear-dw $(sha256sum "$dw_src" | cut -c1-16)" \
  "script $(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)" "compress ${compress[0]}")"

# One build at a time per folder (parallel test workers and runs share ~/.cache/kvwear/guest): the
# second waits, then finds the image up to date.
mkdir -p "$out"
exec 9>"$out/.build.lock"
command -v flock >/dev/null && flock 9

if [ -f "$out/stamp" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ] \
   && [ "$(cat "$out/stamp")" = "$stamp" ]; then
  echo "build-guest: up to date in $out"
  exit 0
fi

mkdir -p "$out"
work="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "build-guest: downloading $kpkg $kver" >&2
(cd "$work" && apt-get download -q -o APT::Sandbox::User=root "$kpkg=$kver" >/dev/null) \
  || die "apt-get download $kpkg failed: check the Debian mirror (apt-get update)"
dpkg-deb -x "$work"/"$kpkg"_*.deb "$work/kernel"
kdir="$(ls -d "$work"/kernel/lib/modules/*/ | head -1)"
kname="$(basename "$kdir")"

root="$work/root"
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,job,out,etc,lib/modules,usr/bin,usr/sbin}
cp "$busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
for b in "${!bins[@]}"; do cp -L "${bins[$b]}" "$root/bin/$b"; done
# Shared libraries (and the dynamic loader) at the paths ldd reports.
for lib in $(ldd "${bins[@]}" | awk '/=> \//{print $3} $1 ~ /^\/.*ld-linux/{print $1}' | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# NVMe driver modules, decompressed here so the guest's busybox insmod can load them.
: > "$root/lib/modules/load-order"
for m in "${modules[@]}"; do
  f="$(find "$kdir" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" \
        -o -name "${m//-/_}.ko" -o -name "${m//-/_}.ko.xz" -o -name "${m//-/_}.ko.zst" \) | head -1)"
  [ -n "$f" ] || die "module $m not in $kpkg"
  case "$f" in
    *.xz) xz -dc "$f" > "$root/lib/modules/$m.ko" ;;
    *.zst) zstd -qdc "$f" > "$root/lib/modules/$m.ko" ;;
    *) cp "$f" "$root/lib/modules/$m.ko" ;;
  esac
  echo "$m" >> "$root/lib/modules/load-order"
done
install -m 0755 "$init_src" "$root/init"
gcc -static -O2 -Wall -Wextra -Werror -o "$root/bin/kvwear-dw" "$dw_src" \
  || die "compiling $dw_src failed (gcc -static needs libc6-dev)"
echo "$stamp" > "$root/etc/kvwear-guest"

(cd "$root" && find . | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) | "${compress[@]}" > "$work/initrd.img"
cp "$work/kernel/boot/vmlinuz-$kname" "$work/vmlinuz"
# The stamp goes first and comes back last: an interrupted swap leaves no stamp, so find_guest
# refuses the folder instead of pairing a new kernel with an old initrd's modules.
rm -f "$out/stamp"
mv "$work/vmlinuz" "$out/vmlinuz"
mv "$work/initrd.img" "$out/initrd.img"
echo "$stamp" > "$out/stamp"
echo "build-guest: built $out (kernel $kname, initrd $(du -h "$out/initrd.img" | cut -f1))"
