/*
 * Fuzz target for region validation: the input overwrites the metadata of
 * a freshly formatted region (header page, registry, job and chunk tables)
 * as a hostile VM could, then the whole reader side runs over it: open,
 * check, info, attach, alloc, job join, gc, detach. Nothing may crash.
 *
 * Input: byte 0 holds flags (bit 0: repair the header checksum so that the
 * fuzzer gets past it into the tables), the rest is laid over the region
 * from offset 0.
 */
#define _GNU_SOURCE 1
#include "internal.h"
#include "fuzz_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_REGION_SIZE (1u << 20)

static unsigned char *pristine;
static size_t meta_len;
static char uri[64];
static unsigned char *live;

static void init_once(void)
{
    if (pristine)
        return;
    int fd = fuzz_format_memfd(FUZZ_REGION_SIZE, uri, sizeof(uri), 100);
    live = mmap(NULL, FUZZ_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
                fd, 0);
    if (live == MAP_FAILED)
        abort();
    const struct ivshm_hdr *h = (const void *)live;
    meta_len = h->heap_off;
    pristine = malloc(meta_len);
    memcpy(pristine, live, meta_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    init_once();
    memcpy(live, pristine, meta_len);
    if (n == 0)
        return 0;
    uint8_t flags = data[0];
    size_t k = n - 1 < meta_len ? n - 1 : meta_len;
    memcpy(live, data + 1, k);
    if (flags & 1) {
        struct ivshm_hdr *h = (struct ivshm_hdr *)live;
        h->hdr_sum = ivshm__fnv1a(h, IVSHM_HDR_SUM_BYTES, IVSHM_FNV_INIT);
    }
    ivshm_region_t *r = NULL;
    ivshm_status_t st = ivshm_region_open(uri, IVSHM_OPEN_NOVALIDATE, &r);
    if (!r)
        return 0;
    ivshm_region_check(r, NULL, NULL);
    if (st == IVSHM_OK) {
        ivshm_region_info_t inf;
        ivshm_region_info(r, &inf);
        for (uint32_t i = 0; i < inf.reg_slots; i++) {
            ivshm_proc_info_t p;
            ivshm_region_proc(r, i, &p);
        }
        for (uint32_t i = 0; i < inf.job_slots; i++) {
            ivshm_job_info_t j;
            ivshm_region_job(r, i, &j);
        }
        if (ivshm_attach(r) == IVSHM_OK) {
            uint64_t off;
            if (ivshm_alloc(r, 5000, &off) == IVSHM_OK) {
                /* memory we were given must lie inside the mapping */
                if (off + 5000 > FUZZ_REGION_SIZE)
                    abort();
                memset((char *)ivshm_region_base(r) + off, 1, 5000);
                ivshm_free(r, off);
            }
            ivshm_job_t *j;
            if (ivshm_job_join(r, "fuzz", 3000, &j) == IVSHM_OK) {
                uint64_t o = ivshm_job_area_off(j);
                if (o + ivshm_job_area_size(j) > FUZZ_REGION_SIZE)
                    abort();
                ivshm_job_leave(j);
            }
            ivshm_identity_t id;
            ivshm_self_identity(r, &id);
            ivshm_peer_locality(r, &id);
            ivshm_gc(r, NULL);
        }
    }
    ivshm_region_close(r);
    return 0;
}

/* Writes the seed corpus: a pristine layout, with and without repair. */
int ivshm_fuzz_write_seeds(const char *dir)
{
    init_once();
    char p[512];
    for (int flags = 0; flags < 2; flags++) {
        snprintf(p, sizeof(p), "%s/pristine-%d", dir, flags);
        FILE *f = fopen(p, "wb");
        if (!f)
            return 1;
        fputc(flags, f);
        fwrite(pristine, 1, meta_len, f);
        fclose(f);
    }
    return 0;
}
