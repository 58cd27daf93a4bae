/*
 * The heap's table of the large blocks it handed out: address, mapped
 * length, and whether the region or private memory holds it. Open
 * addressing with linear probing, in memory from mmap (never from malloc,
 * which it serves). Callers hold tab_lock (heap_internal.h).
 */
#define _GNU_SOURCE
#include "heap_internal.h"

#include <sys/mman.h>

static size_t slot_of(uintptr_t a, size_t cap)
{
    return (size_t)(((a >> 12) * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

long heap__tab_find(uintptr_t a)
{
    if (!heap.cap)
        return -1;
    for (size_t i = slot_of(a, heap.cap), n = 0; n < heap.cap;
         i = (i + 1) & (heap.cap - 1), n++) {
        if (heap.tab[i].state == BLK_FREE)
            return -1;
        if (heap.tab[i].addr == a && heap.tab[i].state != BLK_TOMB)
            return (long)i;
    }
    return -1;
}

static void tab_put(struct blk *tab, size_t cap, struct blk b)
{
    size_t i = slot_of(b.addr, cap);
    while (tab[i].state != BLK_FREE && tab[i].state != BLK_TOMB)
        i = (i + 1) & (cap - 1);
    tab[i] = b;
}

static bool tab_grow(void)
{
    size_t cap = heap.cap ? heap.cap * 2 : 1024;
    struct blk *t = mmap(NULL, cap * sizeof(*t), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED)
        return false;
    size_t used = 0;
    for (size_t i = 0; i < heap.cap; i++)
        if (heap.tab[i].state == BLK_REGION || heap.tab[i].state == BLK_PRIVATE) {
            tab_put(t, cap, heap.tab[i]);
            used++;
        }
    if (heap.tab)
        munmap(heap.tab, heap.cap * sizeof(*heap.tab));
    heap.tab = t;
    heap.cap = cap;
    heap.used = used;
    return true;
}

bool heap__tab_insert(uintptr_t a, size_t len, unsigned state)
{
    if ((heap.used + 1) * 2 > heap.cap && !tab_grow())
        return false;
    tab_put(heap.tab, heap.cap, (struct blk){a, len, state});
    heap.used++;
    if (a < atomic_load_explicit(&heap.lo, RELAXED) ||
        !atomic_load_explicit(&heap.hi, RELAXED))
        atomic_store_explicit(&heap.lo, a, RELAXED);
    if (a + len > atomic_load_explicit(&heap.hi, RELAXED))
        atomic_store_explicit(&heap.hi, a + len, RELAXED);
    return true;
}

bool heap__may_be_ours(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return a >= atomic_load_explicit(&heap.lo, RELAXED) &&
           a < atomic_load_explicit(&heap.hi, RELAXED);
}
