/*
 * Unit tests of the region layer: format, header validation and every bad
 * input case, allocator, registry leases, job areas, co-residency and the
 * PCI provider (over a fake sysfs tree).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "internal.h"
#include "../testutil.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

static char path[256];

static int setup(void **state)
{
    (void)state;
    tu_region_path(path, sizeof(path), "unit");
    unsetenv(IVSHM_ENV_VM_ID);
    unsetenv("IVSHM_SYSFS_ROOT");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static void test_format_and_open(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 4 << 20, 0, 0), IVSHM_OK);
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r), IVSHM_OK);
    ivshm_region_info_t i;
    assert_int_equal(ivshm_region_info(r, &i), IVSHM_OK);
    assert_int_equal(i.size, 4 << 20);
    assert_int_equal(i.version, IVSHM_LAYOUT_VERSION);
    assert_int_equal(i.chunk_size, 65536);
    assert_true(i.chunk_count > 50 && i.chunk_count < 64);
    assert_int_equal(i.chunks_used, 0);
    assert_int_equal(ivshm_region_check(r, NULL, NULL), IVSHM_OK);
    uint8_t u1[16], zero[16] = {0};
    ivshm_region_uuid(r, u1);
    assert_memory_not_equal(u1, zero, 16);
    ivshm_region_close(r);
    /* a second format is refused without force, and keeps the uuid */
    ivshm_format_opts_t o;
    ivshm_format_opts_init(&o);
    assert_int_equal(ivshm_format(tu_uri(path), &o), IVSHM_ERR_EXISTS);
    assert_non_null(strstr(ivshm_last_error(), "--force"));
    o.force = 1;
    assert_int_equal(ivshm_format(tu_uri(path), &o), IVSHM_OK);
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r), IVSHM_OK);
    uint8_t u2[16];
    ivshm_region_uuid(r, u2);
    assert_memory_not_equal(u1, u2, 16);
    ivshm_region_close(r);
}

static void test_missing_file(void **state)
{
    (void)state;
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open("file:/dev/shm/ivshm-no-such", 0, &r),
                     IVSHM_ERR_NOENT);
    assert_null(r);
    assert_non_null(strstr(ivshm_last_error(), "/dev/shm/ivshm-no-such"));
    assert_int_equal(ivshm_region_open("bogus:x", 0, &r), IVSHM_ERR_INVAL);
    assert_int_equal(ivshm_region_open("relative", 0, &r), IVSHM_ERR_INVAL);
}

static void test_permission_denied(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 2 << 20, 0, 0), IVSHM_OK);
    chmod(path, 0600);
    pid_t pid = fork();
    if (pid == 0) {
        /* root bypasses modes: drop to nobody to see what a rank sees */
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(90);
        if (geteuid() != 0)
            chmod(path, 0); /* unprivileged run: remove our own access */
        ivshm_region_t *r;
        ivshm_status_t st = ivshm_region_open(tu_uri(path), 0, &r);
        if (st != IVSHM_ERR_PERM)
            _exit(91);
        if (!strstr(ivshm_last_error(), "chmod") ||
            !strstr(ivshm_last_error(), "udev"))
            _exit(92);
        _exit(0);
    }
    int ws;
    waitpid(pid, &ws, 0);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
}

static void test_too_small(void **state)
{
    (void)state;
    ivshm_format_opts_t o;
    ivshm_format_opts_init(&o);
    o.size = 512 << 10;
    assert_int_equal(ivshm_format(tu_uri(path), &o), IVSHM_ERR_TOO_SMALL);
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    assert_int_equal(ftruncate(fd, 64 << 10), 0);
    close(fd);
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r),
                     IVSHM_ERR_TOO_SMALL);
    assert_non_null(strstr(ivshm_last_error(), "minimum"));
    /* the table would not fit: 1 MiB with 8192 process slots */
    o.size = 1 << 20;
    o.reg_slots = 8192;
    assert_int_equal(ivshm_format(tu_uri(path), &o), IVSHM_ERR_TOO_SMALL);
}

static void test_unformatted(void **state)
{
    (void)state;
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    assert_int_equal(ftruncate(fd, 2 << 20), 0);
    close(fd);
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r),
                     IVSHM_ERR_UNFORMATTED);
}

static ivshm_status_t reopen_status(void)
{
    ivshm_region_t *r;
    ivshm_status_t st = ivshm_region_open(tu_uri(path), 0, &r);
    if (r)
        ivshm_region_close(r);
    return st;
}

static void test_wrong_magic(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 2 << 20, 0, 0), IVSHM_OK);
    size_t len = 0;
    unsigned char *m = tu_map_raw(path, &len);
    memcpy(m, "NOTOURS!", 8);
    assert_int_equal(reopen_status(), IVSHM_ERR_BAD_MAGIC);
    munmap(m, len);
}

static void set_version(uint32_t v)
{
    size_t len = 0;
    unsigned char *m = tu_map_raw(path, &len);
    struct ivshm_hdr *h = (struct ivshm_hdr *)m;
    h->version = v;
    h->hdr_sum = ivshm__fnv1a(h, IVSHM_HDR_SUM_BYTES, IVSHM_FNV_INIT);
    munmap(m, len);
}

static void test_versions(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 2 << 20, 0, 0), IVSHM_OK);
    set_version(IVSHM_LAYOUT_VERSION + 1);
    assert_int_equal(reopen_status(), IVSHM_ERR_VERSION);
    assert_non_null(strstr(ivshm_last_error(), "upgrade libivshm"));
    set_version(IVSHM_LAYOUT_VERSION - 1); /* version 3: senders that do
                                             not count ended lives */
    assert_int_equal(reopen_status(), IVSHM_ERR_VERSION);
    assert_non_null(strstr(ivshm_last_error(), "reformat"));
    set_version(0);
    assert_int_equal(reopen_status(), IVSHM_ERR_VERSION);
    assert_non_null(strstr(ivshm_last_error(), "reformat"));
}

/* Every byte of the immutable header and of the state word, corrupted in
 * turn, is rejected with a validation error (never accepted, never a
 * crash). */
static void test_each_header_field(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 2 << 20, 0, 0), IVSHM_OK);
    size_t len = 0;
    unsigned char *m = tu_map_raw(path, &len);
    unsigned char saved[256];
    memcpy(saved, m, sizeof(saved));
    size_t offs[IVSHM_HDR_SUM_BYTES + 12];
    size_t n = 0;
    for (size_t i = 0; i < IVSHM_HDR_SUM_BYTES + 8; i++)
        offs[n++] = i;
    for (size_t i = 0; i < 4; i++)
        offs[n++] = offsetof(struct ivshm_hdr, state) + i;
    for (size_t k = 0; k < n; k++) {
        m[offs[k]] ^= 0x5a;
        ivshm_status_t st = reopen_status();
        if (st == IVSHM_OK)
            fail_msg("corrupting header byte %zu was accepted", offs[k]);
        assert_true(st == IVSHM_ERR_BAD_MAGIC || st == IVSHM_ERR_VERSION ||
                    st == IVSHM_ERR_CORRUPT || st == IVSHM_ERR_SIZE_MISMATCH ||
                    st == IVSHM_ERR_UNFORMATTED);
        memcpy(m, saved, sizeof(saved));
    }
    assert_int_equal(reopen_status(), IVSHM_OK);
    munmap(m, len);
}

/* One corruption of a named header field, the checksum repaired: what the
 * validator must answer, and the field named in its message. */
struct field_case {
    const char *field;
    size_t off, width;
    int64_t delta; /* added to the field's value */
    ivshm_status_t want;
    const char *text;
};
#define HDR_CASE(f, d, st, t)                                                \
    {#f, offsetof(struct ivshm_hdr, f),                                      \
     sizeof(((struct ivshm_hdr *)0)->f), (d), (st), (t)}

/* Every field region.c validates, each out of its range or off the layout
 * by one step (a field validated only through hdr_sum is covered by the
 * byte walk above). Deltas apply to the formatted 2 MiB region below. */
static const struct field_case field_cases[] = {
    HDR_CASE(magic, 1, IVSHM_ERR_BAD_MAGIC, "bad magic"),
    HDR_CASE(version, 1, IVSHM_ERR_VERSION, "layout version 5"),
    HDR_CASE(version, -1, IVSHM_ERR_VERSION, "layout version 3"),
    HDR_CASE(hdr_size, 4096, IVSHM_ERR_CORRUPT, "'hdr_size'"),
    HDR_CASE(region_size, 4096, IVSHM_ERR_SIZE_MISMATCH, "'region_size'"),
    HDR_CASE(chunk_shift, -5, IVSHM_ERR_CORRUPT, "'chunk_shift'"),
    HDR_CASE(chunk_shift, 15, IVSHM_ERR_CORRUPT, "'chunk_shift'"),
    HDR_CASE(reg_slots, -256, IVSHM_ERR_CORRUPT, "'reg_slots'"),
    HDR_CASE(reg_slots, 65536, IVSHM_ERR_CORRUPT, "'reg_slots'"),
    HDR_CASE(job_slots, -64, IVSHM_ERR_CORRUPT, "'job_slots'"),
    HDR_CASE(job_slots, 4096, IVSHM_ERR_CORRUPT, "'job_slots'"),
    HDR_CASE(chunk_count, 1, IVSHM_ERR_CORRUPT, "'chunk_count'"),
    HDR_CASE(reg_off, 64, IVSHM_ERR_CORRUPT, "'reg_off'"),
    HDR_CASE(job_off, 64, IVSHM_ERR_CORRUPT, "'job_off'"),
    HDR_CASE(chunk_tab_off, 64, IVSHM_ERR_CORRUPT, "'chunk_tab_off'"),
    HDR_CASE(heap_off, 4096, IVSHM_ERR_CORRUPT, "'heap_off'"),
    HDR_CASE(lease_timeout_ms, -9901, IVSHM_ERR_CORRUPT, "'lease_timeout_ms'"),
    HDR_CASE(lease_timeout_ms, 3590001, IVSHM_ERR_CORRUPT,
             "'lease_timeout_ms'"),
    HDR_CASE(flags, 1, IVSHM_ERR_CORRUPT, "'flags'"),
    HDR_CASE(hdr_sum, 1, IVSHM_ERR_CORRUPT, "checksum"),
};

static void add_to_field(unsigned char *m, size_t off, size_t width,
                         int64_t delta)
{
    if (width == 4) {
        uint32_t v;
        memcpy(&v, m + off, 4);
        v += (uint32_t)delta;
        memcpy(m + off, &v, 4);
    } else {
        uint64_t v;
        memcpy(&v, m + off, 8);
        v += (uint64_t)delta;
        memcpy(m + off, &v, 8);
    }
}

static void test_named_header_fields(void **state)
{
    (void)state;
    /* 10 s lease, 256 registry and 64 job slots, 64 KiB chunks (shift 16) */
    assert_int_equal(tu_format(path, 2 << 20, 0, 0), IVSHM_OK);
    size_t len = 0;
    unsigned char *m = tu_map_raw(path, &len);
    assert_non_null(m);
    struct ivshm_hdr *h = (struct ivshm_hdr *)m;
    assert_int_equal(h->lease_timeout_ms, 10000);
    assert_int_equal(h->chunk_shift, 16);
    unsigned char saved[256];
    memcpy(saved, m, sizeof(saved));
    for (size_t k = 0; k < sizeof(field_cases) / sizeof(field_cases[0]); k++) {
        const struct field_case *c = &field_cases[k];
        add_to_field(m, c->off, c->width, c->delta);
        if (strcmp(c->field, "hdr_sum") != 0)
            h->hdr_sum = ivshm__fnv1a(h, IVSHM_HDR_SUM_BYTES, IVSHM_FNV_INIT);
        ivshm_status_t st = reopen_status();
        if (st != c->want || !strstr(ivshm_last_error(), c->text))
            fail_msg("header field %s %+lld: status %d (want %d), \"%s\" "
                     "(want \"%s\" in it)",
                     c->field, (long long)c->delta, (int)st, (int)c->want,
                     ivshm_last_error(), c->text);
        memcpy(m, saved, sizeof(saved));
    }
    /* the state word, outside the checksum: formatting, then garbage */
    atomic_store(&h->state, HDR_FORMATTING);
    assert_int_equal(reopen_status(), IVSHM_ERR_BUSY);
    assert_non_null(strstr(ivshm_last_error(), "being formatted"));
    atomic_store(&h->state, 0x12345678u);
    assert_int_equal(reopen_status(), IVSHM_ERR_CORRUPT);
    assert_non_null(strstr(ivshm_last_error(), "'state'"));
    memcpy(m, saved, sizeof(saved));
    atomic_store(&h->state, HDR_READY);
    assert_int_equal(reopen_status(), IVSHM_OK);
    munmap(m, len);
}

static void test_size_mismatch(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 2 << 20, 0, 0), IVSHM_OK);
    assert_int_equal(truncate(path, 4 << 20), 0);
    assert_int_equal(reopen_status(), IVSHM_ERR_SIZE_MISMATCH);
    assert_non_null(strstr(ivshm_last_error(), "region_size"));
}

static void test_registry_full(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 2 << 20, 4, 0), IVSHM_OK);
    ivshm_region_t *r[5];
    for (int i = 0; i < 5; i++)
        assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r[i]), IVSHM_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(ivshm_attach(r[i]), IVSHM_OK);
    assert_int_equal(ivshm_attach(r[4]), IVSHM_ERR_REGISTRY_FULL);
    assert_non_null(strstr(ivshm_last_error(), "ivshm gc"));
    /* the others are unaffected */
    uint64_t off;
    assert_int_equal(ivshm_alloc(r[0], 1000, &off), IVSHM_OK);
    assert_int_equal(ivshm_lease_renew(r[1]), IVSHM_OK);
    assert_int_equal(ivshm_region_check(r[4], NULL, NULL), IVSHM_OK);
    /* a detach frees a slot for the fifth */
    assert_int_equal(ivshm_detach(r[2]), IVSHM_OK);
    assert_int_equal(ivshm_attach(r[4]), IVSHM_OK);
    for (int i = 0; i < 5; i++)
        ivshm_region_close(r[i]);
}

static void test_allocator(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 4 << 20, 0, 0), IVSHM_OK);
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r), IVSHM_OK);
    uint64_t off;
    assert_int_equal(ivshm_alloc(r, 10, &off), IVSHM_ERR_INVAL); /* detached */
    assert_int_equal(ivshm_attach(r), IVSHM_OK);
    ivshm_region_info_t inf;
    ivshm_region_info(r, &inf);
    uint64_t a, b, c;
    assert_int_equal(ivshm_alloc(r, 1, &a), IVSHM_OK);
    assert_int_equal(ivshm_alloc(r, 3 * 65536 + 1, &b), IVSHM_OK);
    assert_int_equal(ivshm_alloc(r, 65536, &c), IVSHM_OK);
    assert_int_equal(a, inf.heap_off);
    assert_int_equal(b, a + 65536);
    assert_int_equal(c, b + 4 * 65536);
    ivshm_region_info(r, &inf);
    assert_int_equal(inf.chunks_used, 6);
    /* memory is usable and in bounds */
    memset((char *)ivshm_region_base(r) + b, 0xab, 3 * 65536 + 1);
    /* a hole is reused first-fit */
    assert_int_equal(ivshm_free(r, b), IVSHM_OK);
    uint64_t d;
    assert_int_equal(ivshm_alloc(r, 2 * 65536, &d), IVSHM_OK);
    assert_int_equal(d, b);
    /* bad frees are refused */
    assert_int_equal(ivshm_free(r, b + 65536 * 3), IVSHM_ERR_INVAL);
    assert_int_equal(ivshm_free(r, 12345), IVSHM_ERR_INVAL);
    assert_int_equal(ivshm_free(r, a + 1), IVSHM_ERR_INVAL);
    /* exhaustion is NOSPACE, and a message with a fix */
    assert_int_equal(ivshm_alloc(r, 64ull << 20, &d), IVSHM_ERR_NOSPACE);
    assert_non_null(strstr(ivshm_last_error(), "larger region"));
    /* a size near 2^64 is too large, never rounded (wrapped) to a chunk */
    assert_int_equal(ivshm_alloc(r, UINT64_MAX - 4096, &d), IVSHM_ERR_NOSPACE);
    assert_int_equal(ivshm_alloc(r, UINT64_MAX, &d), IVSHM_ERR_NOSPACE);
    while (ivshm_alloc(r, 65536, &d) == IVSHM_OK)
        ;
    ivshm_region_info(r, &inf);
    assert_int_equal(inf.chunks_used, inf.chunk_count);
    assert_int_equal(ivshm_region_check(r, NULL, NULL), IVSHM_OK);
    /* another process's allocation cannot be freed by us */
    ivshm_region_t *r2;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r2), IVSHM_OK);
    assert_int_equal(ivshm_attach(r2), IVSHM_OK);
    assert_int_equal(ivshm_free(r2, a), IVSHM_ERR_INVAL);
    /* detach releases everything it owned */
    ivshm_region_close(r);
    ivshm_region_info(r2, &inf);
    assert_int_equal(inf.chunks_used, 0);
    ivshm_region_close(r2);
}

/* ivshm_region_offset_of / ivshm_region_locate: a front end's own region
 * memory, found by address, with its owner; nothing else */
static void test_locate(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 4 << 20, 0, 0), IVSHM_OK);
    ivshm_region_t *r, *r2;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r), IVSHM_OK);
    assert_int_equal(ivshm_attach(r), IVSHM_OK);
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r2), IVSHM_OK);
    assert_int_equal(ivshm_attach(r2), IVSHM_OK);
    char *base = ivshm_region_base(r);
    uint64_t size = ivshm_region_size(r), a, b, off;
    assert_int_equal(ivshm_alloc(r, 65536, &a), IVSHM_OK);
    assert_int_equal(ivshm_alloc(r2, 65536, &b), IVSHM_OK);
    /* offsets: inside only, whole range, 0 bytes as 1 */
    assert_int_equal(ivshm_region_offset_of(r, base + a, 100), a);
    assert_int_equal(ivshm_region_offset_of(r, base + size - 1, 0), size - 1);
    assert_true(ivshm_region_offset_of(r, base + size, 0) == UINT64_MAX);
    assert_true(ivshm_region_offset_of(r, base + size - 8, 9) == UINT64_MAX);
    assert_true(ivshm_region_offset_of(r, base - 1, 1) == UINT64_MAX);
    assert_true(ivshm_region_offset_of(r, &off, 8) == UINT64_MAX);
    /* our block: its offset and our identity */
    ivshm_identity_t own, self;
    assert_int_equal(ivshm_region_locate(r, base + a + 8, 4096, &off, &own),
                     IVSHM_OK);
    assert_int_equal(off, a + 8);
    assert_int_equal(ivshm_self_identity(r, &self), IVSHM_OK);
    assert_memory_equal(&own, &self, sizeof(own));
    /* another lease's block, past our block's end, private memory, 0 bytes */
    assert_int_equal(ivshm_region_locate(r, base + b, 8, &off, &own),
                     IVSHM_ERR_INVAL);
    assert_int_equal(ivshm_region_locate(r, base + a, 65537, &off, &own),
                     IVSHM_ERR_INVAL);
    assert_int_equal(ivshm_region_locate(r, &self, 8, &off, &own),
                     IVSHM_ERR_INVAL);
    assert_int_equal(ivshm_region_locate(r, base + a, 0, &off, &own),
                     IVSHM_ERR_INVAL);
    /* freed: no longer ours */
    assert_int_equal(ivshm_free(r, a), IVSHM_OK);
    assert_int_equal(ivshm_region_locate(r, base + a, 8, &off, &own),
                     IVSHM_ERR_INVAL);
    ivshm_region_close(r2);
    ivshm_region_close(r);
}

static void test_jobs(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 4 << 20, 0, 0), IVSHM_OK);
    ivshm_region_t *a, *b;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &a), IVSHM_OK);
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &b), IVSHM_OK);
    assert_int_equal(ivshm_attach(a), IVSHM_OK);
    assert_int_equal(ivshm_attach(b), IVSHM_OK);
    ivshm_job_t *ja, *jb, *jc;
    assert_int_equal(ivshm_job_join(a, "", 100, &ja), IVSHM_ERR_INVAL);
    assert_int_equal(ivshm_job_join(a, "job-1", 200000, &ja), IVSHM_OK);
    assert_int_equal(ivshm_job_join(b, "job-1", 999, &jb), IVSHM_OK);
    assert_int_equal(ivshm_job_area_off(ja), ivshm_job_area_off(jb));
    assert_int_equal(ivshm_job_area_size(jb), 200000);
    assert_int_equal(ivshm_job_join(b, "job-2", 1000, &jc), IVSHM_OK);
    assert_int_not_equal(ivshm_job_area_off(jc), ivshm_job_area_off(ja));
    ivshm_job_info_t ji;
    assert_int_equal(ivshm_region_job(a, ivshm_job_index(ja), &ji), IVSHM_OK);
    assert_string_equal(ji.key, "job-1");
    /* b is a member of both jobs */
    assert_int_equal(ji.members, 2);
    ivshm_proc_info_t pi;
    ivshm_identity_t idb;
    ivshm_self_identity(b, &idb);
    assert_int_equal(ivshm_region_proc(a, idb.slot, &pi), IVSHM_OK);
    assert_int_equal(pi.job, 2);
    /* at most IVSHM_JOBS_PER_PROC (4) memberships */
    ivshm_job_t *extra[3];
    assert_int_equal(ivshm_job_join(b, "job-3", 100, &extra[0]), IVSHM_OK);
    assert_int_equal(ivshm_job_join(b, "job-4", 100, &extra[1]), IVSHM_OK);
    assert_int_equal(ivshm_job_join(b, "job-5", 100, &extra[2]),
                     IVSHM_ERR_NOSPACE);
    ivshm_job_leave(extra[0]);
    ivshm_job_leave(extra[1]);
    ivshm_job_leave(jc);
    ivshm_job_leave(jb);
    ivshm_job_leave(ja);
    ivshm_region_info_t inf;
    ivshm_region_info(a, &inf);
    assert_int_equal(inf.job_used, 0);
    assert_int_equal(inf.chunks_used, 0);
    ivshm_region_close(a);
    ivshm_region_close(b);
}

static void test_locality(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 2 << 20, 0, 0), IVSHM_OK);
    char other[256];
    tu_region_path(other, sizeof(other), "other");
    assert_int_equal(tu_format(other, 2 << 20, 0, 0), IVSHM_OK);
    ivshm_region_t *a, *b, *c, *x;
    setenv(IVSHM_ENV_VM_ID, "vm-a", 1);
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &a), IVSHM_OK);
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &c), IVSHM_OK);
    setenv(IVSHM_ENV_VM_ID, "vm-b", 1);
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &b), IVSHM_OK);
    assert_int_equal(ivshm_region_open(tu_uri(other), 0, &x), IVSHM_OK);
    unsetenv(IVSHM_ENV_VM_ID);
    ivshm_region_t *all[] = {a, b, c, x};
    for (int i = 0; i < 4; i++)
        assert_int_equal(ivshm_attach(all[i]), IVSHM_OK);
    ivshm_identity_t ia, ib, ic, ixx;
    ivshm_self_identity(a, &ia);
    ivshm_self_identity(b, &ib);
    ivshm_self_identity(c, &ic);
    ivshm_self_identity(x, &ixx);
    assert_int_equal(ivshm_peer_locality(a, &ia), IVSHM_PEER_SELF);
    assert_int_equal(ivshm_peer_locality(a, &ib), IVSHM_PEER_OTHER_VM);
    assert_int_equal(ivshm_peer_locality(a, &ic), IVSHM_PEER_SAME_VM);
    assert_int_equal(ivshm_peer_locality(a, &ixx), IVSHM_PEER_REMOTE);
    assert_int_equal(ivshm_peer_locality(x, &ia), IVSHM_PEER_REMOTE);
    /* forged or stale identities */
    ivshm_identity_t f = ib;
    f.slot = 100000;
    assert_int_equal(ivshm_peer_locality(a, &f), IVSHM_PEER_STALE);
    f = ib;
    f.vm_id ^= 1;
    assert_int_equal(ivshm_peer_locality(a, &f), IVSHM_PEER_STALE);
    ivshm_detach(b);
    assert_int_equal(ivshm_peer_locality(a, &ib), IVSHM_PEER_STALE);
    for (int i = 0; i < 4; i++)
        ivshm_region_close(all[i]);
    unlink(other);
}

/* Opens and attaches a handle that presents itself as VM `vm`. */
static ivshm_region_t *attach_as(const char *vm)
{
    ivshm_region_t *r;
    setenv(IVSHM_ENV_VM_ID, vm, 1);
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r), IVSHM_OK);
    unsetenv(IVSHM_ENV_VM_ID);
    assert_int_equal(ivshm_attach(r), IVSHM_OK);
    return r;
}

/* Sets the heartbeat of r's lease to `ms` ago, as an owner in another VM
 * that stalled that long leaves it: the test decides the lease's age
 * instead of sleeping against the clock (a loaded machine stalls too). */
static void age_lease(ivshm_region_t *r, uint64_t ms)
{
    atomic_store(&ivshm__reg(r, r->slot)->heartbeat_ns,
                 ivshm__now_ns() - ivshm__ms_to_ns(ms));
}

static uint64_t heartbeat_of(ivshm_region_t *r)
{
    return atomic_load(&ivshm__reg(r, r->slot)->heartbeat_ns);
}

/* A lease of another VM expires after the timeout; before it, a slow owner
 * keeps it; a renew before the gc keeps it; once expired it is only in
 * doubt (its VM may be paused) and a plain gc keeps it; the admin's forced
 * gc releases it, and the owner learns it on renew. */
static void test_lease_expiry(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 2 << 20, 0, 10000), IVSHM_OK);
    ivshm_region_t *slow = attach_as("vm-slow"), *gc = attach_as("vm-gc");
    uint64_t off;
    assert_int_equal(ivshm_alloc(slow, 4096, &off), IVSHM_OK);
    ivshm_gc_stats_t s;
    assert_int_equal(ivshm_gc(gc, &s), IVSHM_OK);
    assert_int_equal(s.procs_reclaimed, 0); /* young lease: kept */
    age_lease(slow, 9000);
    assert_int_equal(ivshm_gc(gc, &s), IVSHM_OK);
    assert_int_equal(s.procs_reclaimed, 0); /* near the timeout: kept */
    age_lease(slow, 20000);
    atomic_store(&slow->last_renew_ns, 0); /* renew now, not rate-limited */
    assert_int_equal(ivshm_lease_renew(slow), IVSHM_OK);
    assert_int_equal(ivshm_gc(gc, &s), IVSHM_OK);
    assert_int_equal(s.procs_reclaimed, 0); /* renewed in time */
    age_lease(slow, 10500);
    assert_int_equal(ivshm_gc(gc, &s), IVSHM_OK);
    assert_int_equal(s.procs_reclaimed, 0); /* in doubt: kept */
    assert_int_equal(s.procs_in_doubt, 1);
    assert_int_equal(ivshm_gc_force(gc, NULL, NULL, &s), IVSHM_OK);
    assert_int_equal(s.procs_reclaimed, 1);
    assert_int_equal(s.chunks_freed, 1);
    atomic_store(&slow->last_renew_ns, 0);
    assert_int_equal(ivshm_lease_renew(slow), IVSHM_ERR_LEASE_LOST);
    ivshm_region_close(slow);
    ivshm_region_close(gc);
}

/* The heartbeat thread renews on its own: each time the owner's lease is
 * aged past the timeout, the thread's next renewal (every timeout/4) is
 * waited for, and a gc then keeps the lease. */
static void test_heartbeat_thread(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 2 << 20, 0, 2000), IVSHM_OK);
    ivshm_region_t *owner = attach_as("vm-1"), *gc = attach_as("vm-2");
    assert_int_equal(ivshm_lease_start_thread(owner), IVSHM_OK);
    ivshm_gc_stats_t s;
    for (int i = 0; i < 3; i++) {
        age_lease(owner, 5000);
        uint64_t aged = heartbeat_of(owner);
        for (int waited = 0; heartbeat_of(owner) <= aged; waited++) {
            if (waited == 30000)
                fail_msg("round %d: no renewal within 30 s", i);
            usleep(1000);
        }
        assert_int_equal(ivshm_gc(gc, &s), IVSHM_OK);
        assert_int_equal(s.procs_reclaimed, 0);
    }
    ivshm_region_close(owner);
    ivshm_region_close(gc);
}

static void write_file(const char *p, const char *content)
{
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

static void make_dev(const char *root, const char *addr, const char *vendor,
                     const char *device, uint64_t size)
{
    char d[512], p[600];
    snprintf(d, sizeof(d), "%s/bus/pci/devices/%s", root, addr);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", d);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof(p), "%s/vendor", d);
    write_file(p, vendor);
    snprintf(p, sizeof(p), "%s/device", d);
    write_file(p, device);
    snprintf(p, sizeof(p), "%s/revision", d);
    write_file(p, "0x01\n");
    snprintf(p, sizeof(p), "%s/resource2", d);
    int fd = open(p, O_RDWR | O_CREAT, 0600);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    close(fd);
}

/* The device goes away under a guarded mapping (here: the backing file is
 * truncated, so the next access raises SIGBUS, as a revoked BAR mapping
 * does): one message naming the region, exit IVSHM_EXIT_REGION_GONE. A
 * SIGBUS elsewhere keeps its default action. */
static int guarded_child(const char *p, bool in_region)
{
    int err[2];
    if (pipe(err) != 0)
        return -1;
    pid_t c = fork();
    if (c == 0) {
        dup2(err[1], STDERR_FILENO);
        signal(SIGBUS, SIG_DFL); /* cmocka's own handler is not the default */
        ivshm_region_t *r;
        if (ivshm_region_open(tu_uri(p), 0, &r) != IVSHM_OK ||
            ivshm_region_guard(r) != IVSHM_OK)
            _exit(2);
        volatile char *at = (char *)ivshm_region_base(r) + 8192;
        char other[] = "/dev/shm/ivshm-guard-other-XXXXXX";
        if (!in_region) {
            int fd = mkstemp(other);
            if (fd < 0 || ftruncate(fd, 8192) != 0)
                _exit(3);
            at = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (at == MAP_FAILED || ftruncate(fd, 0) != 0)
                _exit(3);
            unlink(other);
        } else if (truncate(p, 0) != 0) {
            _exit(3);
        }
        at[100] = 1; /* SIGBUS */
        _exit(4);
    }
    close(err[1]);
    char buf[512] = "";
    ssize_t n = read(err[0], buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(err[0]);
    int ws;
    waitpid(c, &ws, 0);
    if (in_region)
        return WIFEXITED(ws) && WEXITSTATUS(ws) == IVSHM_EXIT_REGION_GONE &&
               strstr(buf, "ivshmem device removed") && strstr(buf, p);
    return WIFSIGNALED(ws) && WTERMSIG(ws) == SIGBUS && buf[0] == '\0';
}

/* A process that exited but is not reaped yet (a zombie) maps nothing: gc
 * reclaims its lease at once, as for a process that is gone. */
static void test_zombie_is_dead(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 8 << 20, 0, 0), IVSHM_OK);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t c = fork();
    if (c == 0) {
        ivshm_region_t *r;
        if (ivshm_region_open(tu_uri(path), 0, &r) != IVSHM_OK ||
            ivshm_attach(r) != IVSHM_OK)
            _exit(2);
        _exit(write(ready[1], "a", 1) == 1 ? 0 : 3); /* no detach */
    }
    char x;
    assert_int_equal(read(ready[0], &x, 1), 1);
    usleep(100 * 1000); /* exited, not reaped */
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r), IVSHM_OK);
    ivshm_gc_stats_t gs;
    assert_int_equal(ivshm_gc(r, &gs), IVSHM_OK);
    assert_int_equal(gs.procs_reclaimed, 1);
    ivshm_region_close(r);
    int ws;
    assert_int_equal(waitpid(c, &ws, 0), c);
    close(ready[0]);
    close(ready[1]);
}

static void test_guard_device_gone(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 8 << 20, 0, 0), IVSHM_OK);
    assert_true(guarded_child(path, false));
    assert_int_equal(tu_format(path, 8 << 20, 0, 0), IVSHM_OK);
    assert_true(guarded_child(path, true));
}

static void test_pci_provider(void **state)
{
    (void)state;
    char root[] = "/tmp/ivshm-sysfs-XXXXXX";
    assert_non_null(mkdtemp(root));
    setenv("IVSHM_SYSFS_ROOT", root, 1);
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open("pci:auto", 0, &r), IVSHM_ERR_NODEV);
    assert_non_null(strstr(ivshm_last_error(), "ivshmem-plain"));
    make_dev(root, "0000:00:03.0", "0x8086\n", "0x100e\n", 4096);
    make_dev(root, "0000:00:04.0", "0x1af4\n", "0x1110\n", 2 << 20);
    ivshm_pci_dev_t devs[4];
    assert_int_equal(ivshm_pci_list(devs, 4), 1);
    assert_string_equal(devs[0].addr, "0000:00:04.0");
    assert_int_equal(devs[0].size, 2 << 20);
    assert_int_equal(devs[0].has_doorbell, 0);
    assert_int_equal(ivshm_region_open("pci:auto", 0, &r),
                     IVSHM_ERR_UNFORMATTED);
    /* a BAR is formatted in place */
    assert_int_equal(ivshm_format("pci:auto", NULL), IVSHM_OK);
    assert_int_equal(ivshm_region_open("pci:auto", 0, &r), IVSHM_OK);
    assert_int_equal(ivshm_attach(r), IVSHM_OK);
    ivshm_region_close(r);
    assert_int_equal(ivshm_region_open("pci:00:04.0", 0, &r), IVSHM_OK);
    ivshm_region_close(r);
    assert_int_equal(ivshm_region_open("pci:0000:00:09.0", 0, &r),
                     IVSHM_ERR_NOENT);
    assert_int_equal(ivshm_region_open("pci:0000:00:03.0", 0, &r),
                     IVSHM_ERR_NODEV);
    make_dev(root, "0000:00:05.0", "0x1af4\n", "0x1110\n", 2 << 20);
    assert_int_equal(ivshm_region_open("pci:auto", 0, &r),
                     IVSHM_ERR_AMBIGUOUS);
    assert_non_null(strstr(ivshm_last_error(), "ivshm list"));
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    unsetenv("IVSHM_SYSFS_ROOT");
}

static void test_check_finds_damage(void **state)
{
    (void)state;
    assert_int_equal(tu_format(path, 4 << 20, 0, 0), IVSHM_OK);
    ivshm_region_t *r;
    assert_int_equal(ivshm_region_open(tu_uri(path), 0, &r), IVSHM_OK);
    assert_int_equal(ivshm_attach(r), IVSHM_OK);
    ivshm_job_t *j;
    assert_int_equal(ivshm_job_join(r, "k", 70000, &j), IVSHM_OK);
    uint64_t off;
    assert_int_equal(ivshm_alloc(r, 3 * 65536, &off), IVSHM_OK);
    assert_int_equal(ivshm_region_check(r, NULL, NULL), IVSHM_OK);
    /* a run whose middle chunk changed owner */
    struct ivshm_chunk *c = ivshm__chunk(r, (uint32_t)((off - r->g.heap_off) >> 16) + 1);
    uint64_t saved = c->owner;
    c->owner = OWNER_TAG(OWNER_PROC, 7, 0);
    assert_int_equal(ivshm_region_check(r, NULL, NULL), IVSHM_ERR_CORRUPT);
    c->owner = saved;
    /* a job area that points outside the heap */
    struct ivshm_job_slot *js = ivshm__jobs(r, ivshm_job_index(j));
    uint64_t so = js->area_off;
    js->area_off = r->g.size - 10;
    assert_int_equal(ivshm_region_check(r, NULL, NULL), IVSHM_ERR_CORRUPT);
    js->area_off = so;
    /* an unknown registry state */
    struct ivshm_reg_slot *rs = ivshm__reg(r, 9);
    rs->word = 0x77;
    assert_int_equal(ivshm_region_check(r, NULL, NULL), IVSHM_ERR_CORRUPT);
    rs->word = 0;
    assert_int_equal(ivshm_region_check(r, NULL, NULL), IVSHM_OK);
    ivshm_job_leave(j);
    ivshm_region_close(r);
}

static void test_strerror(void **state)
{
    (void)state;
    for (int s = 0; s <= IVSHM_ERR_SYS; s++)
        assert_non_null(ivshm_strerror((ivshm_status_t)s));
    assert_string_equal(ivshm_strerror(IVSHM_ERR_VERSION),
                        "unsupported layout version");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_format_and_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_permission_denied, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_small, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unformatted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_each_header_field, setup, teardown),
        cmocka_unit_test_setup_teardown(test_named_header_fields, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_size_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registry_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocator, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locality, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_heartbeat_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pci_provider, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guard_device_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zombie_is_dead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_finds_damage, setup, teardown),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests_name("region", tests, NULL, NULL);
}
