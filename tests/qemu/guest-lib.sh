# Sourced by the QEMU guest tests (tests/qemu/test_*.sh): what they share.

# skip WHY: exit 77 (skipped), or fail where guests are required
# (IVSHM_REQUIRE_GUESTS=1, or IVSHM_REQUIRE_ALL=1 for every tier)
skip() {
    if [ "${IVSHM_REQUIRE_GUESTS:-0}" = 1 ] || [ "${IVSHM_REQUIRE_ALL:-0}" = 1 ]; then
        echo "FAIL: $* (the guest tests must run here: IVSHM_REQUIRE_GUESTS/IVSHM_REQUIRE_ALL=1)"; exit 1
    fi
    echo "SKIP: $*"
    exit 77
}

# install_mpi_component ROOT BUILD SRC: the component where Debian's Open
# MPI looks for it in the guest's root file system, with its help file
install_mpi_component() {
    cp "$2/mpi-plugin/btl/.libs/mca_btl_ivshmem.so" "$2/mpi-plugin/mpool/.libs/mca_mpool_ivshmem.so" \
        "$1/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/"
    cp "$3/mpi-plugin/btl/help-mpi-btl-ivshmem.txt" "$1/usr/share/openmpi/"
}

# busybox_initrd WORK BUILD SRC OUT: the busybox initramfs of the guests of
# test_qemu.sh and test_libvirt.sh (guest-init.sh as /init, ivshmem.ko
# from WORK/mod, the static guest_test and ivshm) written to OUT
busybox_initrd() {
    ir=$1/initramfs
    mkdir -p "$ir/bin" "$ir/proc" "$ir/sys" "$ir/dev" "$ir/tmp"
    cp /bin/busybox "$ir/bin/busybox"
    cp "$3/tests/qemu/guest-init.sh" "$ir/init"
    cp "$1/mod/ivshmem.ko" "$2/tests/qemu/guest_test" "$ir/"
    cp "$2/tests/qemu/ivshm-static" "$ir/ivshm"
    chmod +x "$ir/init" "$ir/guest_test" "$ir/ivshm"
    (cd "$ir" && find . | /bin/busybox cpio -o -H newc 2>/dev/null) > "$4"
}
