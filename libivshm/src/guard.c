/*
 * Region guard: a mapping whose device went away (ivshmem hot-unplug: the
 * guest driver revokes the mapping, sysfs mappings lose their backing; a
 * truncated region file) raises SIGBUS on the next access. The guard turns
 * that into one message naming the cause and an exit with status
 * IVSHM_EXIT_REGION_GONE, instead of a crash that explains nothing. Faults
 * outside guarded regions go to the handler that was there before (or the
 * default action). Only async-signal-safe calls run in the handler.
 */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define GUARD_MAX 8

static struct guarded {
    _Atomic uintptr_t lo, hi; /* [lo, hi) of the mapping, 0: free */
    char msg[256];
    size_t len;
} guards[GUARD_MAX];
static struct sigaction previous;
static atomic_flag installed = ATOMIC_FLAG_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < GUARD_MAX; i++) {
        uintptr_t lo = atomic_load(&guards[i].lo), hi = atomic_load(&guards[i].hi);
        if (lo && a >= lo && a < hi) {
            ssize_t n = write(STDERR_FILENO, guards[i].msg, guards[i].len);
            (void)n;
            _exit(IVSHM_EXIT_REGION_GONE);
        }
    }
    /* not ours: as if we had never been here */
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) {
            previous.sa_sigaction(sig, si, uctx);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL &&
               previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

ivshm_status_t ivshm_region_guard(ivshm_region_t *r)
{
    if (!r->base)
        return ivshm__fail(IVSHM_ERR_INVAL, "region is not mapped");
    int slot = -1;
    for (int i = 0; i < GUARD_MAX && slot < 0; i++)
        if (!atomic_load(&guards[i].lo))
            slot = i;
    if (slot < 0)
        return ivshm__fail(IVSHM_ERR_NOSPACE, "%d regions are guarded already",
                           GUARD_MAX);
    struct guarded *g = &guards[slot];
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    int n = snprintf(g->msg, sizeof(g->msg),
                     "libivshm: process %d on %s: the shared region %s is "
                     "gone (ivshmem device removed, or its backing file "
                     "truncated); ending the process\n",
                     (int)getpid(), host, r->uri);
    g->len = n < 0 ? 0 : ((size_t)n < sizeof(g->msg) ? (size_t)n : sizeof(g->msg) - 1);
    atomic_store(&g->hi, (uintptr_t)r->base + r->map_size);
    atomic_store(&g->lo, (uintptr_t)r->base);
    r->guard_slot = slot + 1;
    if (!atomic_flag_test_and_set(&installed)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, &previous) != 0)
            return ivshm__fail_errno(errno, "cannot install the SIGBUS guard",
                                     r->uri);
    }
    return IVSHM_OK;
}

void ivshm__guard_release(ivshm_region_t *r)
{
    if (!r->guard_slot)
        return;
    struct guarded *g = &guards[r->guard_slot - 1];
    atomic_store(&g->lo, 0);
    atomic_store(&g->hi, 0);
    r->guard_slot = 0;
}
