/*
 * A bystander for the simulated-VM tests: a process of another VM that
 * takes every chunk it can get from the region, fills each with a pattern
 * of its own, holds them until told, then checks that nobody wrote them.
 *
 *   bystander URI GO_FILE
 * Collects dead and expired leases first (ivshm_gc, as any process does),
 * then allocates chunk by chunk until the region is full and prints
 * "bystander: took N chunks". It renews its lease while it waits for
 * GO_FILE to exist (120 s at most), then prints "bystander: N chunks, M
 * changed" and exits 1 if any byte changed.
 */
#include <ivshm/ivshm.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned char pattern(uint64_t off, uint64_t i)
{
    return (unsigned char)((off >> 12) * 13 + i * 7 + 0x5b);
}

int main(int argc, char **argv)
{
    ivshm_region_t *r;
    ivshm_region_info_t ri;
    if (argc != 3) {
        fprintf(stderr, "usage: bystander URI GO_FILE\n");
        return 2;
    }
    if (ivshm_region_open(argv[1], 0, &r) != IVSHM_OK ||
        ivshm_attach(r) != IVSHM_OK || ivshm_region_info(r, &ri) != IVSHM_OK) {
        fprintf(stderr, "bystander: cannot attach %s\n", argv[1]);
        return 2;
    }
    (void)ivshm_gc(r, NULL);
    size_t cap = 1024, n = 0;
    uint64_t *offs = malloc(cap * sizeof(*offs)), off;
    unsigned char *base = ivshm_region_base(r);
    while (offs && ivshm_alloc(r, ri.chunk_size, &off) == IVSHM_OK) {
        if (n == cap && !(offs = realloc(offs, (cap *= 2) * sizeof(*offs))))
            break;
        offs[n++] = off;
        for (uint64_t i = 0; i < ri.chunk_size; i++)
            base[off + i] = pattern(off, i);
    }
    if (!offs)
        return 2;
    printf("bystander: took %zu chunks\n", n);
    fflush(stdout);
    for (int waited = 0; access(argv[2], F_OK) != 0 && waited < 1200; waited++) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        (void)ivshm_lease_renew(r);
    }
    size_t changed = 0;
    for (size_t c = 0; c < n; c++)
        for (uint64_t i = 0; i < ri.chunk_size; i++)
            if (base[offs[c] + i] != pattern(offs[c], i)) {
                changed++;
                break;
            }
    printf("bystander: %zu chunks, %zu changed\n", n, changed);
    free(offs);
    ivshm_region_close(r);
    return changed != 0;
}
