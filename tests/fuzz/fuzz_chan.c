/*
 * Fuzz target for the channel's shared structures, as a hostile or broken
 * peer could write them: the directory entries, the receiver's control
 * header with its fast-box grants and completion tables, its FIFO cells,
 * the fast box it granted, the sender's fragment return counters, and the
 * (offset, length) of a put/get handle. Each input sets up a receiver R
 * and a sender S (two leases) with traffic in flight, overwrites one
 * structure, then runs both sides (progress, sends that pick up grants and
 * fragments, the domain check, the `ivshm stat` walk, handle checks).
 * Nothing may crash, hang or touch memory outside the mapping.
 *
 * Input: byte 0 selects the structure (mod 6), the rest is laid over it.
 */
#define _GNU_SOURCE 1
#include "chan_internal.h"
#include "fuzz_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_REGION_SIZE (4u << 20)

static unsigned char *live, *pristine;
static ivshm_region_t *ra, *rb;
static ivshm_domain_t *da, *db;
static ivshm_ep_config_t cfg;

static void init_once(void)
{
    if (pristine)
        return;
    char uri[64];
    int fd = fuzz_format_memfd(FUZZ_REGION_SIZE, uri, sizeof(uri), 0);
    if (ivshm_region_open(uri, 0, &ra) != IVSHM_OK || ivshm_attach(ra) ||
        ivshm_region_open(uri, 0, &rb) != IVSHM_OK || ivshm_attach(rb) ||
        ivshm_domain_join(ra, "fuzz", 4, &da) != IVSHM_OK ||
        ivshm_domain_join(rb, "fuzz", 4, &db) != IVSHM_OK)
        abort();
    live = mmap(NULL, FUZZ_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                fd, 0);
    pristine = malloc(FUZZ_REGION_SIZE);
    if (live == MAP_FAILED || !pristine)
        abort();
    memcpy(pristine, live, FUZZ_REGION_SIZE);
    ivshm_ep_config_init(&cfg);
    cfg.fifo_cells = 16;
    cfg.cell_size = 128;
    cfg.fbox_cells = 8;
    cfg.fbox_threshold = 2;
    cfg.frag_count = 4;
    cfg.frag_size = 4096;
    ivshm__destroy_grace_ns = 0;
}

static void on_msg(void *arg, const ivshm_msg_t *m)
{
    /* the handler reads what it is given: in bounds, or ASan says so */
    volatile unsigned char sum = 0;
    for (uint32_t i = 0; i < m->len; i++)
        sum += ((const unsigned char *)m->data)[i];
    (void)arg;
}

static void lay(void *dst, size_t room, const uint8_t *d, size_t n)
{
    memcpy(dst, d, n < room ? n : room);
}

/* Makes what we lent look returned, so destroy does not wait for it. */
static void settle(ivshm_ep_t *ep)
{
    for (uint32_t i = 0; i < ep->cfg.frag_count; i++)
        atomic_store(&ep->fdone[i], ep->frag_issued[i]);
}

static void count_ep(void *arg, const char *job, uint32_t index, uint32_t pid,
                     const ivshm_ep_stats_t *s)
{
    (void)job, (void)index, (void)pid, (void)s;
    ++*(unsigned *)arg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    init_once();
    ivshm_ep_t *R, *S;
    if (ivshm_ep_create(da, 0, &cfg, on_msg, NULL, &R) != IVSHM_OK ||
        ivshm_ep_create(db, 1, &cfg, on_msg, NULL, &S) != IVSHM_OK)
        abort();
    uint8_t a[IVSHM_EP_ADDR_SIZE];
    uint32_t to_r, to_s;
    ivshm_ep_address(R, a);
    if (ivshm_ep_connect(S, a, sizeof(a), &to_r) != IVSHM_OK)
        abort();
    ivshm_ep_address(S, a);
    if (ivshm_ep_connect(R, a, sizeof(a), &to_s) != IVSHM_OK)
        abort();
    static unsigned char buf[3000];
    for (int k = 0; k < 6; k++) { /* a fast box granted, fragments lent */
        ivshm_ep_try_send(S, to_r, (uint32_t)k, buf, k % 2 ? 1000 : 20);
        ivshm_ep_progress(R);
    }
    ivshm_ep_try_send(S, to_r, 6, buf, 1000); /* in flight */
    if (n > 0) {
        const uint8_t *d = data + 1;
        size_t m = n - 1;
        switch (data[0] % 6) {
        case 0:
            lay(da->dir, 2 * sizeof(struct dir_entry), d, m);
            break;
        case 1:
            lay((char *)R->ctl + R->g.grants_off,
                R->g.cells_off - R->g.grants_off, d, m);
            break;
        case 2:
            lay(R->cells, (size_t)R->g.fifo_cells * R->g.cell_size, d, m);
            break;
        case 3:
            if (R->peers[1] && R->peers[1]->rx_fbox_hdr)
                lay(R->peers[1]->rx_fbox_hdr, R->fbox_bytes, d, m);
            break;
        case 4:
            lay((char *)S->ctl + S->g.grants_off,
                S->g.cells_off - S->g.grants_off, d, m);
            break;
        case 5: {
            uint64_t v[2] = {0, 0};
            lay(v, sizeof(v), d, m);
            if (ivshm_ep_peer_holds(R, to_s, v[0], v[1]) == IVSHM_OK &&
                (v[0] >= FUZZ_REGION_SIZE || v[1] > FUZZ_REGION_SIZE - v[0]))
                abort(); /* a handle the checks passed lies outside */
            ivshm_ep_peer_alive(R, to_s);
            uint64_t t;
            ivshm_ep_send_region(S, to_r, 7, v[0], (size_t)(v[1] & 0xffffff),
                                 &t);
            break;
        }
        }
    }
    for (int k = 0; k < 4; k++) {
        ivshm_ep_progress(R);
        ivshm_ep_try_send(S, to_r, 8, buf, 20);
        ivshm_ep_try_send(S, to_r, 9, buf, 2000);
        ivshm_ep_try_send(R, to_s, 10, buf, 20);
        ivshm_ep_progress(S);
    }
    ivshm_domain_valid(da, NULL, NULL);
    unsigned eps = 0;
    ivshm_region_endpoints(ra, count_ep, &eps);
    settle(R);
    settle(S);
    ivshm_ep_destroy(S);
    ivshm_ep_destroy(R);
    memcpy(live, pristine, FUZZ_REGION_SIZE); /* as set up, for the next */
    return 0;
}

/* Writes the seed corpus: one input per structure, all zero payload. */
int ivshm_fuzz_write_seeds(const char *dir)
{
    char p[512];
    for (int t = 0; t < 6; t++) {
        snprintf(p, sizeof(p), "%s/chan-%d", dir, t);
        FILE *f = fopen(p, "wb");
        if (!f)
            return 1;
        fputc(t, f);
        for (int i = 0; i < 256; i++)
            fputc(t == 5 ? 0x10 : 0, f);
        fclose(f);
    }
    return 0;
}
