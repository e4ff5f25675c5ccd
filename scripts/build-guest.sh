#!/usr/bin/env bash
# Build the small Linux guest kvwear boots under QEMU/FEMU: a Debian kernel and a busybox
# initramfs holding fio, nvme-cli, smartctl and the mkfs tools of ext4, xfs and f2fs (the host's
# Debian binaries plus the libraries `ldd` lists; a file system whose mkfs the host lacks is left
# out and the stamp's `tools` line says so), the NVMe driver and file-system modules, kvwear's
# /init (emulator/guest_init.sh), kvwear's directive-write tool /bin/kvwear-dw
# (emulator/kvwear_dw.c) and its file player /bin/kvwear-fs (emulator/kvwear_fs.c), both compiled
# here with gcc -static.
#
#   scripts/build-guest.sh [OUT_DIR]      default: $KVWEAR_GUEST_DIR or ~/.cache/kvwear/guest
#
# Output: OUT_DIR/vmlinux (or vmlinuz: below), OUT_DIR/initrd.img, OUT_DIR/stamp (package versions, the /init,
# kvwear-dw and kvwear-fs source hashes, the optional tools present; emulator.guest.require_tool
# refuses an image whose tool line is stale or missing).
# Idempotent: rebuilds only when the stamp changes. Network: only Debian's package mirrors
# (`apt-get download linux-image-…`; the kernel is extracted with dpkg-deb -x, never installed).
# Needs: apt-get, dpkg-deb, busybox-static, fio, nvme-cli, smartmontools, lz4, zstd or gzip, xz-utils,
# gcc with the static C library (libc6-dev) (scripts/install-system-deps.sh installs them); for the
# fs layout in the guest, e2fsprogs, xfsprogs, f2fs-tools.
set -euo pipefail
# Debian keeps smartctl, nvme, the mkfs tools and modinfo in /usr/sbin and /sbin, off an
# unprivileged user's PATH; building the guest needs no root, so look there too.
export PATH="$PATH:/usr/sbin:/sbin"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
out="${1:-${KVWEAR_GUEST_DIR:-$HOME/.cache/kvwear/guest}}"
init_src="$repo/emulator/guest_init.sh"
dw_src="$repo/emulator/kvwear_dw.c"
fs_src="$repo/emulator/kvwear_fs.c"
# The top modules the guest loads; build-guest adds what each needs (modinfo's depends and softdep
# of the kernel it downloads) in load order, since the guest has no modprobe to load them on demand.
# The softdeps matter: ext4, jbd2 and libcrc32c ask the crypto API for "crc32c" and f2fs for "crc32",
# and on 6.1 crc64-rocksoft for its generic implementation. What the kernel builds in (6.12: the CRC
# helpers, t10-pi) is left out; 6.12's nvme-core needs nvme-auth, which 6.1 did not have.
# The NVMe driver's modules load at every boot (load-order); the file systems' only for a job that
# makes one (load-order-fs, after them): under TCG they took 1.4 s of each boot.
modules=(nvme)
fs_modules=(ext4 xfs f2fs)
# The fs layout's mkfs tools (copied under these names: mke2fs picks ext4 from its name).
declare -A mkfs_pkgs=([mkfs.ext4]=e2fsprogs [mkfs.xfs]=xfsprogs [mkfs.f2fs]=f2fs-tools)

die() { echo "build-guest: $*" >&2; exit 1; }
for tool in apt-get apt-cache dpkg-deb dpkg-query sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found (this script needs a Debian system)"
done
# modinfo (kmod) reads the downloaded modules' dependencies.
modinfo="$(command -v modinfo || true)"
[ -n "$modinfo" ] || die "modinfo not found: install kmod (scripts/install-system-deps.sh)"
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
[ -f "$fs_src" ] || die "$fs_src missing"
declare -A mkfs=()
for t in "${!mkfs_pkgs[@]}"; do
  p="$(command -v "$t" || true)"
  if [ -n "$p" ]; then mkfs[$t]="$p"; else echo "build-guest: no $t (Debian package ${mkfs_pkgs[$t]}): left out" >&2; fi
done
tools="$(printf '%s\n' "${!mkfs[@]}" | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//')"
command -v gcc >/dev/null || die "gcc not found: install gcc and libc6-dev (kvwear-dw is compiled statically)"
# lz4 (its legacy frame, the one the kernel unpacks) first: under TCG the guest unpacks it ~0.5 s
# sooner than zstd's 35 MB, for 12 MB more; then zstd, then gzip.
if command -v lz4 >/dev/null; then compress=(lz4 -l -9 -q -c)
elif command -v zstd >/dev/null; then compress=(zstd -q -T0 -10)
else compress=(gzip -6); fi

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
  "$(pkgver smartmontools)" "$(pkgver e2fsprogs)" "$(pkgver xfsprogs)" "$(pkgver f2fs-tools)" \
  "init $(sha256sum "$init_src" | cut -c1-16)" \
  "kvwear-dw $(sha256sum "$dw_src" | cut -c1-16)" "kvwear-fs $(sha256sum "$fs_src" | cut -c1-16)" \
  "tools $tools" \
  "script $(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)" "compress ${compress[0]}")"

# One build at a time per folder (parallel test workers and runs share ~/.cache/kvwear/guest): the
# second waits, then finds the image up to date.
mkdir -p "$out"
exec 9>"$out/.build.lock"
command -v flock >/dev/null && flock 9

if [ -f "$out/stamp" ] && { [ -f "$out/vmlinux" ] || [ -f "$out/vmlinuz" ]; } && [ -f "$out/initrd.img" ] \
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
# Debian 12 ships the modules in lib/modules, Debian 13 (merged /usr) in usr/lib/modules.
kdir=""
for d in "$work"/kernel/lib/modules/*/ "$work"/kernel/usr/lib/modules/*/; do
  [ -d "$d" ] && { kdir="$d"; break; }
done
[ -n "$kdir" ] || die "$kpkg has no lib/modules or usr/lib/modules"
kname="$(basename "$kdir")"

root="$work/root"
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,job,out,etc,lib/modules,usr/bin,usr/sbin}
cp "$busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
for b in "${!bins[@]}"; do cp -L "${bins[$b]}" "$root/bin/$b"; done
for t in "${!mkfs[@]}"; do cp -L "${mkfs[$t]}" "$root/sbin/$t"; done
# mke2fs reads its defaults (the block size and features per size type) from this file, as on the host
[ -f /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$root/etc/mke2fs.conf"
# Shared libraries (and the dynamic loader) at the paths ldd reports.
for lib in $(ldd "${bins[@]}" "${mkfs[@]}" | awk '/=> \//{print $3} $1 ~ /^\/.*ld-linux/{print $1}' | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# Modules, decompressed here so the guest's busybox insmod can load them. Module names are kept
# with underscores (the kernel's own spelling: /sys/module/nvme_core).
declare -A ko_path=() builtin=() placed=()
while IFS= read -r f; do
  m="$(basename "$f")"; m="${m%%.ko*}"; ko_path[${m//-/_}]="$f"
done < <(find "$kdir" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst')
if [ -f "$kdir/modules.builtin" ]; then
  while IFS= read -r f; do
    m="$(basename "$f" .ko)"; builtin[${m//-/_}]=1
  done < "$kdir/modules.builtin"
fi
# A softdep names a crypto algorithm ("crc32c", "crypto-crc32c"): the module implementing it is
# <alg>_generic where one exists, else <alg>; neither means the kernel has it built in.
softdep_module() {
  local a="${1#crypto-}"
  a="${a//-/_}"
  if [ -n "${ko_path[${a}_generic]:-}" ]; then echo "${a}_generic"
  elif [ -n "${ko_path[$a]:-}" ] || [ -n "${builtin[$a]:-}" ]; then echo "$a"; fi
}
place_module() {  # place_module LIST-FILE NAME: NAME after everything it needs, each module once
  local list="$1" m="${2//-/_}" f d
  [ -n "${placed[$m]:-}" ] && return 0
  placed[$m]=1
  [ -n "${builtin[$m]:-}" ] && return 0
  f="${ko_path[$m]:-}"
  [ -n "$f" ] || die "module $m is neither a file nor built into $kpkg"
  for d in $("$modinfo" -F depends "$f" | tr ',' ' '); do place_module "$list" "$d"; done
  for d in $("$modinfo" -F softdep "$f" | tr ' ' '\n' | grep -v ':$' || true); do
    d="$(softdep_module "$d")"
    [ -z "$d" ] || place_module "$list" "$d"
  done
  # A library with a generic implementation registers it separately (6.1: crc64_rocksoft_generic)
  [ -n "${ko_path[${m}_generic]:-}" ] && place_module "$list" "${m}_generic"
  case "$f" in
    *.xz) xz -dc "$f" > "$root/lib/modules/$m.ko" ;;
    *.zst) zstd -qdc "$f" > "$root/lib/modules/$m.ko" ;;
    *) cp "$f" "$root/lib/modules/$m.ko" ;;
  esac
  echo "$m" >> "$list"
}
add_modules() {  # add_modules LIST-FILE MODULE...
  local list="$root/lib/modules/$1" m
  shift
  : > "$list"
  for m in "$@"; do place_module "$list" "$m"; done
}
add_modules load-order "${modules[@]}"
add_modules load-order-fs "${fs_modules[@]}"
install -m 0755 "$init_src" "$root/init"
gcc -static -O2 -Wall -Wextra -Werror -o "$root/bin/kvwear-dw" "$dw_src" \
  || die "compiling $dw_src failed (gcc -static needs libc6-dev)"
gcc -static -O2 -Wall -Wextra -Werror -o "$root/bin/kvwear-fs" "$fs_src" \
  || die "compiling $fs_src failed (gcc -static needs libc6-dev)"
echo "$stamp" > "$root/etc/kvwear-guest"

(cd "$root" && find . | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) | "${compress[@]}" > "$work/initrd.img"
# The kernel QEMU boots: the bzImage's own ELF kernel when it has a PVH entry note (QEMU then enters
# it in 64-bit mode directly: no SeaBIOS real-mode loader, no self-decompression; under TCG a boot
# took 4.0-4.4 s instead of 6.5 s), else the bzImage. The ELF is the bzImage's payload (boot
# protocol >= 2.08: payload_offset at 0x248, relative to the protected-mode code that starts after
# the 1 + setup_sects (0x1f1) sectors of 512 B, and payload_length at 0x24c), decompressed with the
# compressor its magic names.
bz="$work/kernel/boot/vmlinuz-$kname"
byte_at() { od -An -tu1 -j "$2" -N1 "$1" | tr -d ' '; }
u32_at() { od -An -tu4 -j "$2" -N4 "$1" | tr -d ' '; }   # little-endian: x86 hosts only, as the guest
kernel="vmlinuz"
cp "$bz" "$work/vmlinuz"
pm=$(( ($(byte_at "$bz" $((0x1f1))) + 1) * 512 ))
tail -c +$((pm + $(u32_at "$bz" $((0x248))) + 1)) "$bz" > "$work/payload"
truncate -s "$(u32_at "$bz" $((0x24c)))" "$work/payload"
case "$(od -An -tx1 -N4 "$work/payload" | tr -d ' ')" in
  fd377a58) unpack=(xz -dc) ;;
  1f8b08*) unpack=(gzip -dc) ;;
  28b52ffd) unpack=(zstd -qdc) ;;
  *) unpack=() ;;
esac
# The payload ends with the ELF's size (4 bytes, little-endian), which the decompressors take for a
# truncated next stream (xz exits 1): the ELF is checked by that size and its PVH note instead.
if [ ${#unpack[@]} -gt 0 ] && command -v "${unpack[0]}" >/dev/null && command -v readelf >/dev/null; then
  "${unpack[@]}" < "$work/payload" > "$work/vmlinux" 2>/dev/null || true
fi
if [ -f "$work/vmlinux" ] \
   && [ "$(stat -c %s "$work/vmlinux")" = "$(tail -c 4 "$work/payload" | od -An -tu4 | tr -d ' ')" ] \
   && [ "$(readelf -n "$work/vmlinux" 2>/dev/null | grep -cE "0x00000012|PHYS32_ENTRY")" -gt 0 ]; then   # its PVH entry note
  kernel="vmlinux"
  rm -f "$work/vmlinuz"
else
  rm -f "$work/vmlinux"
fi
rm -f "$work/payload"
# The stamp goes first and comes back last: an interrupted swap leaves no stamp, so find_guest
# refuses the folder instead of pairing a new kernel with an old initrd's modules.
rm -f "$out/stamp"
rm -f "$out/vmlinuz" "$out/vmlinux"          # the kernel of either kind the folder had
mv "$work/$kernel" "$out/$kernel"
mv "$work/initrd.img" "$out/initrd.img"
echo "$stamp" > "$out/stamp"
echo "build-guest: built $out (kernel $kname as $kernel, initrd $(du -h "$out/initrd.img" | cut -f1))"
