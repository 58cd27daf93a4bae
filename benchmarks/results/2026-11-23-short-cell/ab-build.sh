# Sourced by the A/B runners (ab-short.sh, chan-lat.sh, and
# ../2026-11-23-threads/mt-ab.sh): builds oldsrc/ (the "before" commit each
# runner names) into _old and the tree into _new, from the repository root
# with the generated build systems present.
top=$(pwd)
build() {
    src=$1 d=$2
    rm -rf "$d" && mkdir -p "$d" && (cd "$d" && "$src/configure" --disable-guest-tests CFLAGS="-O2 -g" >configure.out 2>&1 &&
        make -j8 >make.out 2>&1) || { tail -n 20 "$d/configure.out"; tail -n 20 "$d/make.out"; exit 1; }
}
build "$top/oldsrc" "$top/_old" &
build "$top" "$top/_new"
wait
