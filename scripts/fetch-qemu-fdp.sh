#!/usr/bin/env bash
# A QEMU with NVMe Flexible Data Placement for the FDP guest tests, on Debian 12 only, without
# touching the system QEMU: Debian 12's QEMU 7.2 has no FDP (nvme-subsys `fdp` came in QEMU 8.0),
# Debian's bookworm-backports has QEMU 10. This downloads Debian's own packages qemu-system-x86,
# qemu-system-common and qemu-system-data from bookworm-backports with a private apt state (no
# sources entry is added to the system) and unpacks them (dpkg -x) into
#   ${KVWEAR_QEMU_FDP_PREFIX:-$HOME/.cache/kvwear/qemu-fdp}
# whose usr/bin/qemu-system-x86_64 the tests find (emulator.guest.fdp_qemu_binary). Nothing is
# built; nothing goes into the repository. Its libraries are bookworm's, which the system QEMU's
# packages already installed. Cheap: a second run with the same version does nothing.
#
# Never fails the caller: when the system QEMU has FDP already (Debian 13), the OS is not Debian 12,
# or the download / unpacking / probe fails, it says why on stderr and exits 0 (the FDP guest tests
# then skip, naming the reason).
set -uo pipefail
prefix="${KVWEAR_QEMU_FDP_PREFIX:-$HOME/.cache/kvwear/qemu-fdp}"
skip() { echo "fetch-qemu-fdp: skipped: $*" >&2; exit 0; }
has_fdp() { "$1" -device nvme-subsys,help 2>/dev/null | grep -q '^ *fdp='; }

if command -v qemu-system-x86_64 >/dev/null && has_fdp qemu-system-x86_64; then
  skip "the system QEMU ($(qemu-system-x86_64 --version | head -1)) has NVMe FDP already"
fi
. /etc/os-release 2>/dev/null || skip "no /etc/os-release"
[ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ] || skip "not Debian 12 (${PRETTY_NAME:-unknown})"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || skip "apt-get / dpkg missing"

work="$prefix.apt"
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs" || skip "cannot create $work"
echo "deb http://deb.debian.org/debian bookworm-backports main" > "$work/sources.list"
apt=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=/dev/null"
     -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work" -o "Dir::Cache::Archives=$work/archives"
     -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")
timeout 300 apt-get "${apt[@]}" -qq update >/dev/null 2>"$work/update.err" \
  || skip "apt-get update of bookworm-backports failed: $(tail -1 "$work/update.err")"
version=$(apt-cache "${apt[@]}" madison qemu-system-x86 2>/dev/null | awk -F'|' '/bookworm-backports/ {gsub(/ /, "", $2); print $2; exit}')
[ -n "$version" ] || skip "bookworm-backports lists no qemu-system-x86"
if [ "$(cat "$prefix/.version" 2>/dev/null)" = "$version" ] && has_fdp "$prefix/usr/bin/qemu-system-x86_64"; then
  echo "fetch-qemu-fdp: $prefix/usr/bin/qemu-system-x86_64 ($version) is current" >&2
  exit 0
fi
rm -f "$work/debs/"*.deb
(cd "$work/debs" && timeout 600 apt-get "${apt[@]}" -qq download "qemu-system-x86=$version" \
   "qemu-system-common=$version" "qemu-system-data=$version" >/dev/null 2>"$work/download.err") \
  || skip "downloading qemu-system-x86 $version failed: $(tail -1 "$work/download.err")"
rm -rf "$prefix.new" && mkdir -p "$prefix.new" || skip "cannot create $prefix.new"
for deb in "$work/debs/"*.deb; do
  dpkg -x "$deb" "$prefix.new" || skip "dpkg -x $deb failed"
done
missing=$(ldd "$prefix.new/usr/bin/qemu-system-x86_64" 2>/dev/null | awk '/not found/ {print $1}' | tr '\n' ' ')
[ -z "$missing" ] || skip "QEMU $version needs libraries this system lacks: $missing"
has_fdp "$prefix.new/usr/bin/qemu-system-x86_64" || skip "QEMU $version from backports shows no nvme-subsys fdp"
echo "$version" > "$prefix.new/.version"
rm -rf "$prefix" && mv "$prefix.new" "$prefix" && rm -f "$work/debs/"*.deb
echo "fetch-qemu-fdp: $prefix/usr/bin/qemu-system-x86_64 ($version)" >&2
