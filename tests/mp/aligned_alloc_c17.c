/*
 * A stand-in for glibc 2.38's aligned_alloc, for tests/mp/test_heap_conform.sh
 * on an older glibc: ISO C17's rule, an alignment that is not a power of
 * two (0 included) is refused with EINVAL; any other is memalign's. Loaded
 * after libivshm-heap.so (LD_PRELOAD="heap.so this.so"), it is the next
 * aligned_alloc that the heap hands the alignments it does not serve, as
 * glibc's own is on 2.38 and later. heap_conform finds the marker and
 * expects 2.38's answers.
 */
#include <errno.h>
#include <stddef.h>

extern void *__libc_memalign(size_t align, size_t size);

const int heap_conform_aligned_alloc_c17 = 1;

void *aligned_alloc(size_t align, size_t size)
{
    if (!align || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    return __libc_memalign(align, size);
}
