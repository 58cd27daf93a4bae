#!/bin/sh
# after run5.sh: is the handler called directly in the device's build?
so=_build-dev2/named/_b/mpi-plugin/btl/.libs/mca_btl_ivshmem.so
objdump -d --no-show-raw-insn $so | awk '/<progress_usual_named[^>]*>:$/,/^$/' | grep -E "call" | head -5
objdump -d --no-show-raw-insn $so | awk '/<progress_usual_named[^>]*>:$/,/^$/' | wc -l
