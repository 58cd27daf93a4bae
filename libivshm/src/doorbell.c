/*
 * Doorbell notifier: a receiver that blocks sleeps in the guest driver
 * (read/poll on its own file of /dev/ivshmemN, which holds one claimed
 * MSI-X vector) and a sender wakes it by ringing (peer IVPosition, vector)
 * through the device. The receiver publishes its doorbell in its directory
 * entry; that word is untrusted like everything else in the region, but a
 * wrong value can only ring the wrong vector (the device ignores unknown
 * peers and vectors), never corrupt memory.
 *
 * The notify-word protocol of the channel (arm, re-check, wait) is
 * unchanged: a sender rings only a receiver that armed its word. A sender
 * without the driver cannot ring, so the wait re-checks the word every
 * recheck interval ($IVSHM_DOORBELL_RECHECK_MS, default 100 ms).
 */
#include "doorbell.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "ivshmem_uapi.h"

#define DEFAULT_RECHECK_MS 100u

ivshm_status_t ivshm__db_open(ivshm_region_t *r, struct dir_entry *dir,
                              uint32_t max_eps, struct ivshm__doorbell **out)
{
    *out = NULL;
    const char *env = getenv("IVSHM_DOORBELL");
    if (env && strcmp(env, "0") == 0)
        return ivshm__fail(IVSHM_ERR_NOTSUP, "doorbells off ($IVSHM_DOORBELL=0)");
    if (!ivshm__provider_is_dev(r->prov))
        return ivshm__fail(IVSHM_ERR_NOTSUP,
                           "doorbells need the guest driver (region %s is "
                           "not a dev: region)",
                           r->uri);
    struct ivshmem_info info;
    ivshm_status_t st = ivshm__dev_info(r->fd, r->uri, &info);
    if (st != IVSHM_OK)
        return st;
    if (!(info.flags & IVSHMEM_F_DOORBELL) || info.vectors == 0)
        return ivshm__fail(IVSHM_ERR_NOTSUP,
                           "%s is an ivshmem-plain device: no interrupts "
                           "(use ivshmem-doorbell and ivshm-server)",
                           r->uri);
    struct ivshm__doorbell *db = calloc(1, sizeof(*db));
    if (!db)
        return ivshm__fail(IVSHM_ERR_SYS, "out of memory");
    db->ring_fd = r->fd;
    db->wait_fd = -1;
    db->ivpos = info.ivposition;
    db->dir = dir;
    db->max_eps = max_eps;
    const char *rc = getenv("IVSHM_DOORBELL_RECHECK_MS");
    unsigned long ms = rc && *rc ? strtoul(rc, NULL, 10) : DEFAULT_RECHECK_MS;
    db->recheck_ns = ivshm__ms_to_ns(ms ? ms : 1);

    /* a file of our own: the vector claim belongs to it and is released
     * by the kernel when the process dies */
    int fd = open(r->uri, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    int32_t vec = -1;
    if (fd >= 0 && ioctl(fd, IVSHMEM_IOC_CLAIM_VECTOR, &vec) == 0 &&
        vec >= 0 && vec < IVSHMEM_MAX_VECTORS) {
        db->wait_fd = fd;
        db->vector = (uint32_t)vec;
    } else if (fd >= 0) {
        close(fd); /* all vectors taken: we can ring, but we poll */
    }
    *out = db;
    return IVSHM_OK;
}

uint32_t ivshm__db_word(const struct ivshm__doorbell *db)
{
    return db->wait_fd >= 0 ? DB_WORD(db->ivpos, db->vector) : 0;
}

void ivshm__db_close(struct ivshm__doorbell *db)
{
    if (!db)
        return;
    if (db->wait_fd >= 0)
        close(db->wait_fd);
    free(db);
}

void ivshm__db_ring(void *ctx, uint32_t peer_index)
{
    struct ivshm__doorbell *db = ctx;
    if (peer_index >= db->max_eps)
        return;
    uint32_t w = atomic_load_explicit(&db->dir[peer_index].doorbell,
                                      memory_order_acquire);
    if (!(w & DB_VALID) || DB_VEC(w) >= IVSHMEM_MAX_VECTORS)
        return; /* the receiver has no doorbell: it re-checks by itself */
    struct ivshmem_ring ring = {.peer = (uint16_t)DB_PEER(w),
                                .vector = (uint16_t)DB_VEC(w)};
    if (ioctl(db->ring_fd, IVSHMEM_IOC_RING, &ring) == 0)
        db->rings++;
}

ivshm_status_t ivshm__db_wait(void *ctx, const volatile uint64_t *word,
                              uint64_t seen, uint64_t timeout_ns)
{
    struct ivshm__doorbell *db = ctx;
    const _Atomic uint64_t *w = (const _Atomic uint64_t *)word;
    uint64_t now = ivshm__mono_ns();
    uint64_t deadline = timeout_ns == UINT64_MAX || timeout_ns > UINT64_MAX - now
                            ? UINT64_MAX
                            : now + timeout_ns;
    for (;;) {
        if (atomic_load(w) != seen)
            return IVSHM_OK;
        if (now >= deadline)
            return IVSHM_ERR_AGAIN;
        uint64_t slice = deadline - now;
        if (slice > db->recheck_ns)
            slice = db->recheck_ns;
        struct pollfd pfd = {.fd = db->wait_fd, .events = POLLIN};
        int n = poll(&pfd, 1, (int)((slice + 999999) / 1000000));
        if (n > 0 && (pfd.revents & POLLIN)) {
            uint64_t cnt;
            if (read(db->wait_fd, &cnt, sizeof(cnt)) == sizeof(cnt))
                db->irqs += cnt;
        } else if (n > 0) {
            /* the device went away (POLLERR/POLLHUP): the caller's own
             * wait takes over (see ivshm_notifier_t) */
            return ivshm__fail(IVSHM_ERR_NODEV,
                               "doorbell of %s is gone: waits poll from now",
                               "the ivshmem device");
        }
        now = ivshm__mono_ns();
    }
}
