#!/bin/sh
# Builds .devtools/ in the repository root: Debian 12's iproute2 and the
# libraries it needs, unpacked (not installed) from the package archive,
# with .devtools/bin/ip running it. The device machines have no `ip` and no
# package registry; carry .devtools along (the run tool's `carry`) and
# scripts/device-build.sh puts .devtools/bin on PATH, so that the
# simulated VMs (tests/simvm/simvm.sh) work there. Run on the Debian 12
# development machine (apt-get download needs no root, only the archive).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
debs=$(mktemp -d)
chmod a+rwx "$debs" # apt-get download fetches as the _apt user
trap 'rm -rf "$debs"' EXIT
trap 'exit 1' INT TERM
cd "$debs"
apt-get download iproute2 libbpf1 libelf1 libmnl0 libbsd0 libcap2 libmd0 libxtables12 >/dev/null
rm -rf "$top/.devtools"
mkdir -p "$top/.devtools/root" "$top/.devtools/bin"
for d in ./*.deb; do dpkg -x "$d" "$top/.devtools/root"; done
cat >"$top/.devtools/bin/ip" <<'WRAP'
#!/bin/sh
d=$(cd "$(dirname "$0")/.." && pwd)/root
LD_LIBRARY_PATH=$d/lib/x86_64-linux-gnu:$d/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$d/bin/ip" "$@"
WRAP
chmod +x "$top/.devtools/bin/ip"
"$top/.devtools/bin/ip" -V
