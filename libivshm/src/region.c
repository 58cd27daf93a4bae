/*
 * The region format (docs/region-format.md): geometry, formatting
 * (race-free between VMs via the header state word), mapping and header
 * validation. Reading a mapped region for the tool (info, slots, the
 * layout check) is inspect.c's.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

#define FORMAT_WAIT_MS 5000

void ivshm_format_opts_init(ivshm_format_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->chunk_size = 64 * 1024;
    o->reg_slots = 256;
    o->job_slots = 64;
    o->lease_timeout_ms = 10000;
    o->mode = 0660;
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

/* The one place that derives the layout from its parameters: format uses
 * it to write the header, validation to check one. */
static bool compute_geom(uint64_t size, uint32_t shift, uint32_t reg_slots,
                         uint32_t job_slots, struct ivshm_geom *g)
{
    if (shift < IVSHM_CHUNK_SHIFT_MIN || shift > IVSHM_CHUNK_SHIFT_MAX ||
        reg_slots == 0 || reg_slots > IVSHM_REG_SLOTS_MAX || job_slots == 0 ||
        job_slots > IVSHM_JOB_SLOTS_MAX || size < IVSHM_MIN_REGION_SIZE)
        return false;
    uint64_t csize = 1ull << shift;
    g->size = size;
    g->chunk_shift = shift;
    g->reg_slots = reg_slots;
    g->job_slots = job_slots;
    g->reg_off = IVSHM_HDR_SIZE;
    g->job_off = g->reg_off + (uint64_t)reg_slots * sizeof(struct ivshm_reg_slot);
    g->chunk_tab_off =
        g->job_off + (uint64_t)job_slots * sizeof(struct ivshm_job_slot);
    uint64_t count = size >> shift;
    for (;;) {
        if (count == 0)
            return false;
        uint64_t heap = align_up(
            g->chunk_tab_off + count * sizeof(struct ivshm_chunk), csize);
        if (heap + (count << shift) <= size) {
            g->heap_off = heap;
            break;
        }
        count--;
    }
    if (count > 0xffffffu)
        return false;
    g->chunk_count = (uint32_t)count;
    return true;
}

static uint64_t header_sum(const struct ivshm_hdr *h)
{
    return ivshm__fnv1a(h, IVSHM_HDR_SUM_BYTES, IVSHM_FNV_INIT);
}

ivshm_status_t ivshm__validate_header(const struct ivshm_hdr *shared,
                                      uint64_t map_size, struct ivshm_geom *g)
{
    /* Read once: every decision below is taken on this private copy. */
    struct ivshm_hdr h;
    memcpy(&h, (const void *)shared, offsetof(struct ivshm_hdr, state));
    uint32_t state = atomic_load_explicit(&shared->state, memory_order_acquire);

    if (state == HDR_EMPTY && h.magic == 0)
        return ivshm__fail(IVSHM_ERR_UNFORMATTED,
                           "region holds no ivshm format; run 'ivshm format'");
    if (h.magic != IVSHM_MAGIC)
        return ivshm__fail(IVSHM_ERR_BAD_MAGIC,
                           "bad magic 0x%016llx: this region holds no ivshm "
                           "format (or something else uses it); reformat "
                           "with 'ivshm format --force' if it is ours",
                           (unsigned long long)h.magic);
    if (h.version != IVSHM_LAYOUT_VERSION)
        return ivshm__fail(IVSHM_ERR_VERSION,
                           "region layout version %u, this libivshm reads "
                           "version %u: %s",
                           h.version, IVSHM_LAYOUT_VERSION,
                           h.version > IVSHM_LAYOUT_VERSION
                               ? "upgrade libivshm on this VM"
                               : "reformat the region with this version's "
                                 "'ivshm format --force'");
    if (state != HDR_READY)
        return ivshm__fail(state == HDR_FORMATTING ? IVSHM_ERR_BUSY
                                                   : IVSHM_ERR_CORRUPT,
                           state == HDR_FORMATTING
                               ? "region is being formatted (or its formatter "
                                 "died: run 'ivshm format --force')"
                               : "header field 'state' holds 0x%08x",
                           state);
    if (h.hdr_size != IVSHM_HDR_SIZE)
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "header field 'hdr_size' is %u, expected %u",
                           h.hdr_size, IVSHM_HDR_SIZE);
    if (h.region_size != map_size)
        return ivshm__fail(IVSHM_ERR_SIZE_MISMATCH,
                           "header field 'region_size' says %llu bytes but "
                           "the mapping has %llu: the device or file was "
                           "resized; reformat it",
                           (unsigned long long)h.region_size,
                           (unsigned long long)map_size);
    /* the parameters of the layout, each by name; then the layout */
    const struct {
        const char *name;
        uint32_t v, min, max;
    } ranged[] = {
        {"chunk_shift", h.chunk_shift, IVSHM_CHUNK_SHIFT_MIN,
         IVSHM_CHUNK_SHIFT_MAX},
        {"reg_slots", h.reg_slots, 1, IVSHM_REG_SLOTS_MAX},
        {"job_slots", h.job_slots, 1, IVSHM_JOB_SLOTS_MAX},
        {"lease_timeout_ms", h.lease_timeout_ms, IVSHM_LEASE_MIN_MS,
         IVSHM_LEASE_MAX_MS},
    };
    for (size_t i = 0; i < sizeof(ranged) / sizeof(ranged[0]); i++)
        if (ranged[i].v < ranged[i].min || ranged[i].v > ranged[i].max)
            return ivshm__fail(IVSHM_ERR_CORRUPT,
                               "header field '%s' is %u (%u to %u allowed)",
                               ranged[i].name, ranged[i].v, ranged[i].min,
                               ranged[i].max);
    struct ivshm_geom want;
    if (!compute_geom(h.region_size, h.chunk_shift, h.reg_slots, h.job_slots,
                      &want))
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "header geometry is impossible (chunk_shift %u, "
                           "reg_slots %u, job_slots %u)",
                           h.chunk_shift, h.reg_slots, h.job_slots);
    static const struct {
        const char *name;
        size_t off_hdr, off_geom;
        size_t width;
    } fields[] = {
        {"chunk_count", offsetof(struct ivshm_hdr, chunk_count),
         offsetof(struct ivshm_geom, chunk_count), 4},
        {"reg_off", offsetof(struct ivshm_hdr, reg_off),
         offsetof(struct ivshm_geom, reg_off), 8},
        {"job_off", offsetof(struct ivshm_hdr, job_off),
         offsetof(struct ivshm_geom, job_off), 8},
        {"chunk_tab_off", offsetof(struct ivshm_hdr, chunk_tab_off),
         offsetof(struct ivshm_geom, chunk_tab_off), 8},
        {"heap_off", offsetof(struct ivshm_hdr, heap_off),
         offsetof(struct ivshm_geom, heap_off), 8},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (memcmp((char *)&h + fields[i].off_hdr,
                   (char *)&want + fields[i].off_geom, fields[i].width) != 0)
            return ivshm__fail(IVSHM_ERR_CORRUPT,
                               "header field '%s' does not match the layout",
                               fields[i].name);
    }
    if (h.flags != 0)
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "header field 'flags' has unknown bits 0x%x",
                           h.flags);
    if (header_sum(&h) != h.hdr_sum)
        return ivshm__fail(IVSHM_ERR_CORRUPT,
                           "header checksum mismatch: a header field (uuid, "
                           "creation time or reserved bytes) was overwritten");
    want.lease_timeout_ms = h.lease_timeout_ms;
    memcpy(want.uuid, h.uuid, 16);
    *g = want;
    return IVSHM_OK;
}

static ivshm_status_t map_region(const char *uri, bool rdonly, bool create,
                                 uint64_t create_size, ivshm_region_t **out)
{
    if (!uri || !*uri) {
        uri = getenv(IVSHM_ENV_REGION);
        if (!uri || !*uri)
            uri = IVSHM_DEFAULT_URI;
    }
    static _Atomic uint64_t serials;
    ivshm_region_t *r = calloc(1, sizeof(*r));
    if (!r)
        return ivshm__fail(IVSHM_ERR_SYS, "out of memory");
    r->fd = -1;
    r->serial = atomic_fetch_add(&serials, 1) + 1;
    ivshm_status_t st = ivshm__provider_open(uri, rdonly, create, create_size,
                                             &r->prov, &r->fd, &r->map_size,
                                             &r->uri);
    if (st != IVSHM_OK)
        goto err_free;
    if (r->map_size < IVSHM_MIN_REGION_SIZE) {
        st = ivshm__fail(IVSHM_ERR_TOO_SMALL,
                         "region %s has %llu bytes; the minimum is %llu (1 "
                         "MiB): give the device or file a larger size",
                         r->uri, (unsigned long long)r->map_size,
                         (unsigned long long)IVSHM_MIN_REGION_SIZE);
        goto err_close;
    }
    r->rdonly = rdonly;
    r->base = mmap(NULL, r->map_size, PROT_READ | (rdonly ? 0 : PROT_WRITE),
                   MAP_SHARED, r->fd, 0);
    if (r->base == MAP_FAILED) {
        r->base = NULL;
        st = ivshm__fail_errno(errno, "cannot map", r->uri);
        goto err_close;
    }
    *out = r;
    return IVSHM_OK;

err_close:
    close(r->fd);
err_free:
    free(r->uri);
    free(r);
    return st;
}

static int range_cmp(const void *a, const void *b)
{
    uintptr_t x = ((const struct ivshm_range *)a)->start;
    uintptr_t y = ((const struct ivshm_range *)b)->start;
    return x < y ? -1 : x > y;
}

/* Unmaps the mapping but for the kept ranges (sorted, disjoint). */
static void unmap_keeping(ivshm_region_t *r)
{
    uintptr_t at = (uintptr_t)r->base, end = at + r->map_size;
    qsort(r->keep, r->nkeep, sizeof(*r->keep), range_cmp);
    for (size_t i = 0; i < r->nkeep; i++) {
        if (r->keep[i].start > at)
            munmap((void *)at, r->keep[i].start - at);
        if (r->keep[i].end > at)
            at = r->keep[i].end;
    }
    if (end > at)
        munmap((void *)at, end - at);
}

ivshm_status_t ivshm_region_keep_range(ivshm_region_t *r, void *addr,
                                       size_t len)
{
    uintptr_t a = (uintptr_t)addr, base = (uintptr_t)r->base;
    long pg = sysconf(_SC_PAGESIZE);
    if (!r->base || len == 0 || a < base || len > r->map_size ||
        a - base > r->map_size - len || (a | len) % (uintptr_t)pg)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "range %p+%zu is not a page-aligned part of the "
                           "mapping of %s", addr, len, r->uri);
    struct ivshm_range *k = realloc(r->keep, (r->nkeep + 1) * sizeof(*k));
    if (!k)
        return ivshm__fail(IVSHM_ERR_SYS, "out of memory");
    k[r->nkeep++] = (struct ivshm_range){a, a + len};
    r->keep = k;
    return IVSHM_OK;
}

ivshm_status_t ivshm_region_map_alias(ivshm_region_t *r, uint64_t off,
                                      uint64_t len, void *addr)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (!r->base || r->rdonly || len == 0 || len > r->map_size ||
        off > r->map_size - len || (off | len | (uintptr_t)addr) % (uint64_t)pg)
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "range %llu+%llu at %p is not a page-aligned part "
                           "of %s", (unsigned long long)off,
                           (unsigned long long)len, addr, r->uri);
    /* MAP_FIXED_NOREPLACE: never over memory the caller did not free */
    void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED_NOREPLACE, r->fd, (off_t)off);
    if (p == MAP_FAILED)
        return ivshm__fail_errno(errno, "cannot map a second view of",
                                 r->uri);
    if (p != addr) { /* a kernel older than 4.17 took it as a hint */
        munmap(p, len);
        return ivshm__fail(IVSHM_ERR_INVAL, "cannot map %s at %p", r->uri,
                           addr);
    }
    return IVSHM_OK;
}

static void unmap_region(ivshm_region_t *r)
{
    ivshm__guard_release(r);
    if (r->base && r->nkeep)
        unmap_keeping(r);
    else if (r->base)
        munmap(r->base, r->map_size);
    free(r->keep);
    free((void *)r->doubt_gave_up);
    if (r->fd >= 0)
        close(r->fd);
    free(r->uri);
    free(r);
}

/* Waits (bounded) while another process formats the region. */
static uint32_t wait_not_formatting(struct ivshm_hdr *h)
{
    uint64_t deadline = ivshm__mono_ns() + ivshm__ms_to_ns(FORMAT_WAIT_MS);
    unsigned spins = 0;
    uint32_t s;
    while ((s = atomic_load_explicit(&h->state, memory_order_acquire)) ==
               HDR_FORMATTING &&
           ivshm__mono_ns() < deadline)
        ivshm__backoff(&spins);
    return s;
}

/* What a failed format undoes to a region file: the file if it made it,
 * else the size it had. */
struct file_undo {
    char *path; /* NULL: not a file */
    bool existed;
    off_t size;
};

static void undo_note(const char *uri, struct file_undo *u)
{
    memset(u, 0, sizeof(*u));
    const char *path = strncmp(uri, "file:", 5) == 0 ? uri + 5 : uri;
    /* exclusive create: "we made it" holds even against a concurrent
     * formatter of the same path */
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0660);
    if (fd >= 0) {
        close(fd);
    } else {
        struct stat st;
        if (errno != EEXIST || stat(path, &st) != 0)
            return; /* cannot tell: leave it alone */
        u->existed = true;
        u->size = st.st_size;
    }
    u->path = strdup(path);
}

/* st: why the format failed. A region another process holds or formats
 * (EXISTS, BUSY) is left as it is: it is theirs now. */
static void undo_apply(struct file_undo *u, ivshm_status_t st)
{
    if (!u->path || st == IVSHM_ERR_EXISTS || st == IVSHM_ERR_BUSY) {
        free(u->path);
        u->path = NULL;
        return;
    }
    if (!u->existed)
        (void)unlink(u->path);
    else
        (void)truncate(u->path, u->size);
    free(u->path);
    u->path = NULL;
}

ivshm_status_t ivshm_format(const char *uri, const ivshm_format_opts_t *o)
{
    ivshm_format_opts_t def;
    if (!o) {
        ivshm_format_opts_init(&def);
        o = &def;
    }
    if (o->size && o->size < IVSHM_MIN_REGION_SIZE)
        return ivshm__fail(IVSHM_ERR_TOO_SMALL,
                           "size %llu is below the 1 MiB minimum",
                           (unsigned long long)o->size);
    if (o->chunk_size < 4096 || (o->chunk_size & (o->chunk_size - 1)))
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "chunk size %u is not a power of two >= 4096",
                           o->chunk_size);
    bool is_file = uri && (strncmp(uri, "file:", 5) == 0 || uri[0] == '/');
    /* a format that fails leaves no file it made, and no size it set */
    struct file_undo undo = {0};
    if (is_file)
        undo_note(uri, &undo);
    ivshm_region_t *r;
    ivshm_status_t st = map_region(uri, false, is_file, o->size, &r);
    if (st != IVSHM_OK) {
        undo_apply(&undo, st);
        return st;
    }
    if (is_file) {
        struct statfs sfs;
        bool huge = fstatfs(r->fd, &sfs) == 0 && sfs.f_type == HUGETLBFS_MAGIC;
        if (o->hugepages && !huge) {
            st = ivshm__fail(IVSHM_ERR_INVAL,
                             "%s is not on hugetlbfs; mount one (mount -t "
                             "hugetlbfs none /dev/hugepages) and put the "
                             "region there",
                             r->uri);
            goto out;
        }
        if (o->mode)
            (void)fchmod(r->fd, o->mode);
    }
    uint32_t shift = (uint32_t)__builtin_ctz(o->chunk_size);
    struct ivshm_geom g;
    if (!compute_geom(r->map_size, shift, o->reg_slots, o->job_slots, &g)) {
        st = ivshm__fail(IVSHM_ERR_TOO_SMALL,
                         "%llu bytes cannot hold %u registry slots, %u job "
                         "slots and one %u-byte chunk",
                         (unsigned long long)r->map_size, o->reg_slots,
                         o->job_slots, o->chunk_size);
        goto out;
    }
    if (o->lease_timeout_ms < IVSHM_LEASE_MIN_MS ||
        o->lease_timeout_ms > IVSHM_LEASE_MAX_MS) {
        st = ivshm__fail(IVSHM_ERR_INVAL, "lease timeout %u ms is outside 100 "
                                          "ms .. 1 h",
                         o->lease_timeout_ms);
        goto out;
    }
    struct ivshm_hdr *h = r->base;
    uint32_t cur = atomic_load_explicit(&h->state, memory_order_acquire);
    if (cur == HDR_FORMATTING && !o->force)
        cur = wait_not_formatting(h);
    if (cur == HDR_READY && !o->force) {
        struct ivshm_geom tmp;
        st = ivshm__validate_header(h, r->map_size, &tmp) == IVSHM_OK
                 ? ivshm__fail(IVSHM_ERR_EXISTS,
                               "%s already holds a valid region; use --force "
                               "to reformat it (every attached process "
                               "loses its state)",
                               r->uri)
                 : ivshm__fail(IVSHM_ERR_EXISTS,
                               "%s holds a damaged region; use --force to "
                               "reformat it",
                               r->uri);
        goto out;
    }
    if (cur != HDR_EMPTY && !o->force) {
        st = ivshm__fail(cur == HDR_FORMATTING ? IVSHM_ERR_BUSY
                                               : IVSHM_ERR_EXISTS,
                         "%s is in use or being formatted; use --force",
                         r->uri);
        goto out;
    }
    /* F0: exactly one formatter wins this CAS; pairs with the acquire load
     * of state by attachers (F1). */
    if (!atomic_compare_exchange_strong(&h->state, &cur, HDR_FORMATTING)) {
        uint32_t s = wait_not_formatting(h);
        st = ivshm__fail(s == HDR_READY ? IVSHM_ERR_EXISTS : IVSHM_ERR_BUSY,
                         "another process formatted %s concurrently", r->uri);
        goto out;
    }
    uint64_t nonce;
    ivshm__random(&nonce, sizeof(nonce));
    atomic_store(&h->format_nonce, nonce);
    memset((char *)r->base + g.reg_off, 0, g.heap_off - g.reg_off);
    struct ivshm_hdr nh;
    memset(&nh, 0, sizeof(nh));
    nh.magic = IVSHM_MAGIC;
    nh.version = IVSHM_LAYOUT_VERSION;
    nh.hdr_size = IVSHM_HDR_SIZE;
    nh.region_size = g.size;
    ivshm__random(nh.uuid, sizeof(nh.uuid));
    nh.uuid[6] = (uint8_t)((nh.uuid[6] & 0x0f) | 0x40); /* RFC 4122 v4 */
    nh.uuid[8] = (uint8_t)((nh.uuid[8] & 0x3f) | 0x80);
    nh.created_ns = ivshm__now_ns();
    nh.chunk_shift = g.chunk_shift;
    nh.chunk_count = g.chunk_count;
    nh.reg_slots = g.reg_slots;
    nh.job_slots = g.job_slots;
    nh.reg_off = g.reg_off;
    nh.job_off = g.job_off;
    nh.chunk_tab_off = g.chunk_tab_off;
    nh.heap_off = g.heap_off;
    nh.lease_timeout_ms = o->lease_timeout_ms;
    nh.hdr_sum = header_sum(&nh);
    memcpy(h, &nh, offsetof(struct ivshm_hdr, state));
    atomic_store(&h->attaches, 0);
    atomic_store(&h->reclaims, 0);
    /* a forced format ends every life: counted, never reset (a reset
     * could meet a count a sender recorded; K0) */
    atomic_fetch_add_explicit(&h->lives_ended, 1, memory_order_release);
    /* F1: publish; everything above happens-before an attacher's acquire. */
    atomic_store_explicit(&h->state, HDR_READY, memory_order_release);
    st = IVSHM_OK;
out:
    unmap_region(r);
    if (st != IVSHM_OK)
        undo_apply(&undo, st);
    free(undo.path);
    return st;
}

ivshm_status_t ivshm_region_open(const char *uri, unsigned flags,
                                 ivshm_region_t **out)
{
    *out = NULL;
    ivshm_region_t *r = NULL; /* set where the mapping succeeds */
    ivshm_status_t st =
        map_region(uri, (flags & IVSHM_OPEN_RDONLY) != 0, false, 0, &r);
    if (st != IVSHM_OK)
        return st;
    wait_not_formatting(r->base);
    st = ivshm__validate_header(r->base, r->map_size, &r->g);
    r->valid = st == IVSHM_OK;
    if (st != IVSHM_OK && !(flags & IVSHM_OPEN_NOVALIDATE)) {
        unmap_region(r);
        return st;
    }
    r->vm_id = ivshm_vm_id();
    if (r->valid) /* without it, every doubt is waited for anew */
        r->doubt_gave_up = calloc(r->g.reg_slots, sizeof(*r->doubt_gave_up));
    *out = r;
    return st;
}

void ivshm_region_close(ivshm_region_t *r)
{
    if (!r)
        return;
    if (r->attached)
        ivshm_detach(r);
    unmap_region(r);
}

const char *ivshm_region_uri(const ivshm_region_t *r) { return r->uri; }
uint64_t ivshm_region_size(const ivshm_region_t *r) { return r->map_size; }
void *ivshm_region_base(const ivshm_region_t *r) { return r->base; }
const char *ivshm_region_memtype(const ivshm_region_t *r)
{
    return ivshm__provider_memtype(r->prov, r->fd);
}
void ivshm_region_uuid(const ivshm_region_t *r, uint8_t uuid[16])
{
    memcpy(uuid, r->g.uuid, 16);
}

void ivshm_uuid_str(const uint8_t u[16], char out[37])
{
    snprintf(out, 37,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x"
             "%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
             u[11], u[12], u[13], u[14], u[15]);
}
