#!/bin/sh
# Prepares what the QEMU guest tests need, from Debian's packages only:
#   KIT/vmlinux        uncompressed kernel (boots through PVH: ~3 s to /init)
#   KIT/kdir           build tree for guest modules (headers + kbuild)
#   KIT/kver           the kernel version
# Usage: guest-kit.sh KIT_DIR       (idempotent; ~85 MB downloaded once)
# The packages are fetched with 'apt-get download' and unpacked with
# dpkg-deb: nothing is installed on the host and its own kernel is untouched.
set -eu
kit=${1:?usage: guest-kit.sh KIT_DIR}
mkdir -p "$kit"
kit=$(cd "$kit" && pwd)
[ -s "$kit/vmlinux" ] && [ -f "$kit/kdir/Makefile" ] && [ -s "$kit/kver" ] && exit 0

# the newest 6.1 kernel that Debian's metapackage points at
find_abi() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        sed -n 's/.*Depends: linux-image-\(6\.1\.[0-9]*-[0-9]*\)-amd64$/\1/p' | head -n1
}
abi=$(find_abi)
if [ -z "$abi" ] && [ "$(id -u)" = 0 ]; then
    apt-get update -q >/dev/null 2>&1 || true
    abi=$(find_abi)
fi
if [ -z "$abi" ]; then
    echo "guest-kit: no linux-image-6.1.*-amd64 in the apt lists (run apt-get update)" >&2
    exit 1
fi
kver=$abi-amd64
debs="$kit/debs"
mkdir -p "$debs" "$kit/root"
(cd "$debs" &&
 for p in linux-image-$kver linux-headers-$kver linux-headers-$abi-common linux-kbuild-6.1; do
     ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download -q "$p" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
     ls "${p}"_*.deb >/dev/null 2>&1 || { echo "guest-kit: cannot download $p" >&2; exit 1; }
 done)
for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$kit/root"; done

# The amd64 headers' Makefile includes the -common tree by absolute path.
hdr="$kit/root/usr/src/linux-headers-$kver"
sed -i "s|/usr/src/linux-headers-$abi-common|$kit/root/usr/src/linux-headers-$abi-common|" "$hdr/Makefile"
ln -sfn "$hdr" "$kit/kdir"

# vmlinux from the bzImage: the compressed payload starts at
# payload_offset (header 0x248) after the real-mode setup sectors.
bz="$kit/root/boot/vmlinuz-$kver"
u8() { od -An -tu1 -j "$2" -N1 "$1" | tr -d ' '; }
u32() { od -An -tu4 -j "$2" -N4 "$1" | tr -d ' '; }
setup=$(u8 "$bz" $((0x1f1))); [ "$setup" -eq 0 ] && setup=4
poff=$(( (setup + 1) * 512 + $(u32 "$bz" $((0x248))) ))
plen=$(u32 "$bz" $((0x24c)))
magic=$(od -An -tx1 -j "$poff" -N4 "$bz" | tr -d ' ')
case $magic in
    fd377a58) dec="xz -dc" ;;
    28b52ffd) dec="zstd -dc" ;;
    1f8b*)    dec="gzip -dc" ;;
    *) echo "guest-kit: unknown kernel compression (magic $magic)" >&2; exit 1 ;;
esac
tail -c +$((poff + 1)) "$bz" | head -c "$plen" | $dec > "$kit/vmlinux.tmp" 2>/dev/null || true
[ "$(od -An -tx1 -N4 "$kit/vmlinux.tmp" | tr -d ' ')" = 7f454c46 ] ||
    { echo "guest-kit: could not extract vmlinux from $bz" >&2; exit 1; }
mv "$kit/vmlinux.tmp" "$kit/vmlinux"
echo "$kver" > "$kit/kver"
echo "guest-kit: kernel $kver ready in $kit"
