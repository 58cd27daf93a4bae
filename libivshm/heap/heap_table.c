/*
 * The heap's table of the large blocks it handed out: address, mapped
 * length, and whether the region or private memory holds it. Open
 * addressing with linear probing, in memory from mmap (never from malloc,
 * which it serves). Callers hold tab_lock (heap_internal.h).
 *
 * The table holds the live blocks and nothing else, so that its size and
 * the cost of one resize follow them, not every block ever made (a process
 * that replaces its buffers millions of times keeps a table of its live
 * ones). A removal closes its gap by moving later entries of its run back
 * (no tombstones); the table doubles when the live blocks would fill half
 * of it and halves when they fill less than an eighth, never going below
 * TAB_MIN slots. A resize rehashes the live entries once: with at most one
 * block per region chunk (and the blocks moved to private memory), that
 * bounds the longest malloc or free (docs/heap.md, "The table").
 */
#define _GNU_SOURCE
#include "heap_internal.h"

#include <sys/mman.h>

enum { TAB_MIN = 128 }; /* 3 KiB: a page's worth at the least */

static size_t slot_of(uintptr_t a, size_t cap)
{
    return (size_t)(((a >> 12) * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

long heap__tab_find(uintptr_t a)
{
    if (!heap.cap)
        return -1;
    /* load at most one half: a run ends at a free slot */
    for (size_t i = slot_of(a, heap.cap); heap.tab[i].state != BLK_FREE;
         i = (i + 1) & (heap.cap - 1))
        if (heap.tab[i].addr == a)
            return (long)i;
    return -1;
}

static void tab_put(struct blk *tab, size_t cap, struct blk b)
{
    size_t i = slot_of(b.addr, cap);
    while (tab[i].state != BLK_FREE)
        i = (i + 1) & (cap - 1);
    tab[i] = b;
}

/* The live entries move to a new table of cap slots; false (the table
 * unchanged) without memory for it. */
static bool tab_resize(size_t cap)
{
    struct blk *t = mmap(NULL, cap * sizeof(*t), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED)
        return false;
    for (size_t i = 0; i < heap.cap; i++)
        if (heap.tab[i].state != BLK_FREE)
            tab_put(t, cap, heap.tab[i]);
    if (heap.tab)
        munmap(heap.tab, heap.cap * sizeof(*heap.tab));
    heap.tab = t;
    heap.cap = cap;
    return true;
}

bool heap__tab_insert(uintptr_t a, size_t len, unsigned state)
{
    if ((heap.live + 1) * 2 > heap.cap &&
        !tab_resize(heap.cap ? heap.cap * 2 : TAB_MIN))
        return false;
    tab_put(heap.tab, heap.cap, (struct blk){a, len, state});
    heap.live++;
    if (a < atomic_load_explicit(&heap.lo, RELAXED) ||
        !atomic_load_explicit(&heap.hi, RELAXED))
        atomic_store_explicit(&heap.lo, a, RELAXED);
    if (a + len > atomic_load_explicit(&heap.hi, RELAXED))
        atomic_store_explicit(&heap.hi, a + len, RELAXED);
    return true;
}

void heap__tab_remove(size_t i)
{
    size_t mask = heap.cap - 1, hole = i;
    /* An entry later in the run moves into the hole when the hole lies on
     * its probe path, from its home slot to where it sits. */
    for (size_t j = (i + 1) & mask; heap.tab[j].state != BLK_FREE;
         j = (j + 1) & mask) {
        size_t home = slot_of(heap.tab[j].addr, heap.cap);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            heap.tab[hole] = heap.tab[j];
            hole = j;
        }
    }
    heap.tab[hole] = (struct blk){0, 0, BLK_FREE};
    heap.live--;
    /* without memory for the smaller table the larger one serves on */
    if (heap.cap > TAB_MIN && heap.live * 8 < heap.cap)
        (void)tab_resize(heap.cap / 2);
}

bool heap__may_be_ours(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return a >= atomic_load_explicit(&heap.lo, RELAXED) &&
           a < atomic_load_explicit(&heap.hi, RELAXED);
}
