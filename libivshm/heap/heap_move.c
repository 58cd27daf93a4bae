/*
 * Moving region blocks to private memory at the same address: at detach
 * (the backend goes, the blocks stay the application's) and in a fork
 * child (the region's pages are the parent's). See docs/heap.md, "After
 * MPI_Finalize" and "fork()".
 */
#define _GNU_SOURCE
#include "heap_internal.h"

#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

/* Fresh private memory of len bytes, or NULL. Populated at once: one
 * system call instead of a page fault per page of the copy. */
static void *anon(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* What became of a block's pages (put_in_place). */
enum placed {
    PLACED,       /* private memory holding the block's bytes */
    INACCESSIBLE, /* no copy: private pages with no access (a fault) */
    STILL_SHARED, /* the kernel refused every new mapping (ENOMEM: the
                   * process' map count): the region's pages are still
                   * there, so the block must go with the region's mapping */
};

/* copy (private memory holding the block's bytes, or NULL) takes the
 * place of the pages at [a, a + len). Without a copy they become
 * inaccessible: a fault, never a write into memory another process owns. */
static enum placed put_in_place(void *copy, uintptr_t a, size_t len)
{
    if (copy && mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a) != MAP_FAILED)
        return PLACED;
    if (copy)
        munmap(copy, len);
    if (mmap((void *)a, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) != MAP_FAILED)
        return INACCESSIBLE;
    return STILL_SHARED;
}

/* ---- detach: no write is lost while a block moves ----
 *
 * A block is read-only while it is copied. A thread that writes it then
 * faults; the handler below holds that thread until the copy has taken
 * the block's place and returns, and the store is made again, into the
 * copy. Blocks move one at a time, so a writer waits for one block's copy
 * at most. Any other fault goes to the handler that was there before: the
 * application's, or the default (the crash). The handler uses atomics and
 * sched_yield only. A system call that writes into the block meanwhile
 * (read(2) into it) fails with EFAULT instead: the kernel sends no signal
 * for it. */
static struct {
    _Atomic int active;              /* a detach is moving blocks */
    _Atomic uintptr_t lo, hi;        /* the span of the blocks it moves */
    _Atomic uintptr_t cur_lo, cur_hi; /* the block being copied, read-only */
    struct sigaction prev;           /* SIGSEGV's action before the move */
    sigset_t mover_mask;             /* the moving thread's, before it */
} mv;

static void chain(int sig, siginfo_t *si, void *ctx)
{
    void (*h)(int) = mv.prev.sa_handler; /* a union with sa_sigaction */
    if (h != SIG_DFL && h != SIG_IGN) {
        if (mv.prev.sa_flags & SA_SIGINFO)
            mv.prev.sa_sigaction(sig, si, ctx);
        else
            h(sig);
        return;
    }
    /* the default action (a hardware fault is never ignored): put it back,
     * and the fault, repeated on return, ends the process */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGSEGV, &dfl, NULL);
}

static void on_fault(int sig, siginfo_t *si, void *ctx)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    /* After the move (a fault delivered late): the store is made again,
     * and a real fault repeats into the previous handler, back in place. */
    if (!atomic_load(&mv.active))
        return;
    if (a < atomic_load(&mv.lo) || a >= atomic_load(&mv.hi)) {
        chain(sig, si, ctx);
        return;
    }
    /* Pairs with the clearing of cur_hi in move_block, after the copy took
     * the block's place. A block that moved before this thread got here is
     * writable again; a real fault in the span (a block left inaccessible)
     * repeats until the move ends, then goes to the previous handler. */
    bool waited = false;
    while (a >= atomic_load(&mv.cur_lo) && a < atomic_load(&mv.cur_hi)) {
        sched_yield();
        waited = true;
    }
    if (!waited)
        sched_yield();
}

static void move_begin(uintptr_t lo, uintptr_t hi)
{
    /* The moving thread takes no asynchronous signal meanwhile: a handler
     * of the application (a sampling profiler's) that wrote the block
     * being copied would wait in on_fault for this very thread. Faults
     * stay deliverable. */
    sigset_t async;
    sigfillset(&async);
    sigdelset(&async, SIGSEGV);
    sigdelset(&async, SIGBUS);
    sigdelset(&async, SIGILL);
    sigdelset(&async, SIGFPE);
    sigdelset(&async, SIGTRAP);
    pthread_sigmask(SIG_BLOCK, &async, &mv.mover_mask);
    atomic_store(&mv.lo, lo);
    atomic_store(&mv.hi, hi);
    atomic_store(&mv.cur_hi, 0);
    atomic_store(&mv.cur_lo, 0);
    sigaction(SIGSEGV, NULL, &mv.prev); /* before ours can run */
    atomic_store(&mv.active, 1);
    struct sigaction sa = {.sa_sigaction = on_fault,
                           .sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
}

static void move_end(void)
{
    /* an action the application set meanwhile stays */
    struct sigaction now;
    sigaction(SIGSEGV, NULL, &now);
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_fault)
        sigaction(SIGSEGV, &mv.prev, NULL);
    atomic_store(&mv.active, 0);
    pthread_sigmask(SIG_SETMASK, &mv.mover_mask, NULL);
}

/* One block to private memory while other threads may write it. */
static enum placed move_block(uintptr_t a, size_t len)
{
    void *copy = anon(len);
    /* lo before hi, and hi cleared first: a range read half-updated is
     * empty or too wide, and a waiter reads it again */
    atomic_store(&mv.cur_lo, a);
    atomic_store(&mv.cur_hi, a + len);
    if (mprotect((void *)a, len, PROT_READ) != 0)
        heap__say("ivshm heap: cannot hold off writers while a %zu-byte buffer "
            "moves to private memory; writes made during its copy may be lost\n", len);
    if (copy)
        memcpy(copy, (void *)a, len);
    enum placed placed = put_in_place(copy, a, len);
    atomic_store(&mv.cur_hi, 0);
    atomic_store(&mv.cur_lo, 0);
    return placed;
}

/* ---- every block ---- */

/* What the parent copied for the child before the fork (fork_prepare). */
struct fork_copy {
    uintptr_t addr;
    size_t len;
    void *copy; /* NULL: no memory for it */
};
static struct fork_copy *fork_copies; /* mmap'd, fork_n entries */
static size_t fork_n, fork_list_len;

static void *forked_copy(size_t k, const struct blk *b)
{
    const struct fork_copy *c = k < fork_n ? &fork_copies[k] : NULL;
    return c && c->addr == b->addr && c->len == b->len ? c->copy : NULL;
}

/* Every region block becomes private (life and tab_lock held). At detach
 * (forked false) each moves as above and its chunks go back to the
 * backend; in a fork child each takes the copy made before the fork, and
 * the chunks stay the parent's. Returns the blocks moved; their ranges in
 * *ranges (mmap'd, one entry each) when ranges is not NULL. */
static size_t privatize_all(bool forked, struct blk **ranges)
{
    size_t n = 0;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (size_t i = 0; i < heap.cap; i++) {
        struct blk *b = &heap.tab[i];
        if (b->state != BLK_REGION)
            continue;
        n++;
        lo = b->addr < lo ? b->addr : lo;
        hi = b->addr + b->len > hi ? b->addr + b->len : hi;
    }
    if (ranges) {
        *ranges = n ? anon(n * sizeof(struct blk)) : NULL;
        if (n && !*ranges)
            heap__say("ivshm heap: no memory to list %zu live buffers for the "
                "region's owner; they go when the region is unmapped\n", n);
    }
    if (n && !forked)
        move_begin(lo, hi);
    size_t k = 0, kept = 0, lost = 0, shared = 0;
    for (size_t i = 0; i < heap.cap; i++) {
        struct blk *b = &heap.tab[i];
        if (b->state != BLK_REGION)
            continue;
        enum placed placed = forked
                                 ? put_in_place(forked_copy(k, b), b->addr, b->len)
                                 : move_block(b->addr, b->len);
        lost += placed != PLACED;
        shared += placed == STILL_SHARED;
        /* still the region's pages: its chunks stay under our lease until
         * the lease ends, and the pages go with the region's mapping (not
         * listed as kept), so no write of ours reaches another owner */
        if (!forked && placed != STILL_SHARED)
            heap.be.free((void *)b->addr);
        b->state = BLK_PRIVATE;
        if (ranges && *ranges && placed != STILL_SHARED)
            (*ranges)[kept++] = *b;
        k++;
    }
    if (n && !forked)
        move_end();
    if (lost)
        heap__say("ivshm heap: no memory to keep %zu buffers out of the shared "
            "region; their pages are now inaccessible\n", lost);
    if (shared)
        heap__say("ivshm heap: the kernel refused new mappings for %zu buffers "
            "(vm.max_map_count?); they go with the region's mapping\n", shared);
    atomic_fetch_add_explicit(&heap.moved, k, RELAXED);
    atomic_store_explicit(&heap.region_live, 0, RELAXED);
    atomic_store_explicit(&heap.attached, 0, RELAXED);
    memset(&heap.be, 0, sizeof(heap.be));
    return k;
}

size_t ivshm_heap_detach(ivshm_heap_kept_fn kept, void *arg)
{
    pthread_rwlock_wrlock(&heap.life);
    pthread_mutex_lock(&heap.tab_lock);
    struct blk *ranges = NULL;
    size_t n = atomic_load_explicit(&heap.attached, RELAXED)
                   ? privatize_all(false, &ranges)
                   : 0;
    pthread_mutex_unlock(&heap.tab_lock);
    pthread_rwlock_unlock(&heap.life);
    if (ranges) {
        for (size_t i = 0; i < n && kept; i++)
            if (ranges[i].len) /* a block left with the region: not kept */
                kept((void *)ranges[i].addr, ranges[i].len, arg);
        munmap(ranges, n * sizeof(*ranges));
    }
    return n;
}

/* ---- fork: the child gets the parent's memory as of the fork ----
 *
 * The region is shared: the kernel gives the child the same pages, not
 * copies. The parent copies each live block into private memory before
 * the fork (prepare); the child puts the copies in the blocks' places
 * (child); the parent drops its references to them (parent). The child
 * thus holds what the blocks held when fork was called, whatever the
 * parent writes once fork returns in it. */

void heap__fork_prepare(void)
{
    pthread_rwlock_wrlock(&heap.life);
    pthread_mutex_lock(&heap.tab_lock);
    if (!atomic_load_explicit(&heap.attached, RELAXED))
        return;
    size_t n = 0;
    for (size_t i = 0; i < heap.cap; i++)
        n += heap.tab[i].state == BLK_REGION;
    fork_list_len = n * sizeof(struct fork_copy);
    fork_copies = n ? anon(fork_list_len) : NULL;
    if (!fork_copies)
        return; /* the child finds the blocks inaccessible, and says so */
    for (size_t i = 0; i < heap.cap; i++) {
        struct blk *b = &heap.tab[i];
        if (b->state != BLK_REGION)
            continue;
        void *copy = anon(b->len);
        if (copy)
            memcpy(copy, (void *)b->addr, b->len);
        fork_copies[fork_n++] = (struct fork_copy){b->addr, b->len, copy};
    }
}

static void drop_fork_copies(void)
{
    if (fork_copies)
        munmap(fork_copies, fork_list_len);
    fork_copies = NULL;
    fork_n = 0;
}

void heap__fork_parent(void)
{
    for (size_t k = 0; k < fork_n; k++)
        if (fork_copies[k].copy)
            munmap(fork_copies[k].copy, fork_copies[k].len);
    drop_fork_copies();
    pthread_mutex_unlock(&heap.tab_lock);
    pthread_rwlock_unlock(&heap.life);
}

/* A child shares the parent's region mapping: its writes to a region block
 * would land in the parent's buffer, and its frees would free the parent's
 * chunks. Each block becomes the copy made before the fork, and the child
 * allocates from the C library only (it holds no lease of its own). */
void heap__fork_child(void)
{
    if (atomic_load_explicit(&heap.attached, RELAXED))
        privatize_all(true, NULL);
    drop_fork_copies();
    /* the child's one thread has a new id: the locks the parent's thread
     * took in fork_prepare are made anew, not unlocked */
    pthread_mutex_init(&heap.tab_lock, NULL);
    pthread_rwlock_init(&heap.life, NULL);
}
