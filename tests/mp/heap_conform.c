/*
 * The region heap's entry points against the C library's (issue #27,
 * item 11; DESIGN §3, invariant 11: the heap is malloc). One program,
 * run twice by tests/mp/test_heap_conform.sh: plain, where glibc's malloc
 * answers and is the reference, and with LD_PRELOAD=libivshm-heap.so and
 * a real region attached (--heap). Every check prints one line of what a
 * caller can observe (NULL or a block, errno, the return code, whether
 * the block is aligned, zeroed, writable, at least as large as asked,
 * whether realloc kept the bytes): never an address, so that the two runs
 * print the same lines when the heap behaves as glibc does.
 *
 * Each run also asserts what glibc documents and does (messages on
 * stderr, exit 1): NULL with ENOMEM for sizes no memory holds and for
 * overflowing products, EINVAL for alignments no power of two can give,
 * errno untouched on success and by free. One rule differs between
 * versions: aligned_alloc with an alignment that is not a power of two (0
 * included) is memalign's up to glibc 2.37 (rounded up: a block), and
 * refused with EINVAL from 2.38; the version comes from
 * gnu_get_libc_version(), or 2.38's rule when the script preloads its
 * stand-in (aligned_alloc_c17.c). With --heap, blocks of the heap's
 * threshold (64 KiB) and more must come from the region, and alignments
 * above a page, or that aligned_alloc leaves to the C library, from the
 * C library.
 *
 *   heap_conform [--heap]
 */
#define _GNU_SOURCE
#include "../heap_region.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <malloc.h>

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)
#define REGION_SIZE (64 * MIB)
#define SENTINEL EXDEV /* errno before each call: a call that sets it shows */

enum place { ANY, REGION, LIBC };
enum want { BLOCK, NOMEM, INVAL, FREED, FAILED /* NULL, errno not asserted */,
             ODD_ALIGN /* aligned_alloc, no power of two: by version */ };

static bool heap_run;
static bool c17_aligned_alloc; /* glibc 2.38's aligned_alloc rule */
static size_t page;
static int failures;
static void (*stats_fn)(ivshm_heap_stats_t *);

static void bad(const char *what, const char *why)
{
    fprintf(stderr, "FAIL: %s: %s\n", what, why);
    failures++;
}

static const char *err_name(int e)
{
    const char *n = e ? strerrorname_np(e) : "0";
    return n ? n : "?";
}

static size_t pow2_at_least(size_t a)
{
    size_t p = 1;
    while (p < a && p <= SIZE_MAX / 2)
        p <<= 1;
    return p;
}

/* One check's line, but for its end (the caller may add properties):
 * what came back, and the block's properties. The block is written
 * (calloc's read first: zero) when it is not huge. */
static void report(const char *what, void *p, int err, enum want want,
                   size_t size, size_t align, enum place place, bool zeroed)
{
    printf("%s: %s errno=%s", what, p ? "block" : "NULL", err_name(err));
    if (p) {
        bool aligned = (uintptr_t)p % align == 0;
        bool big_enough = malloc_usable_size(p) >= size;
        printf(" aligned(%zu)=%s usable>=%zu:%s", align, aligned ? "yes" : "no",
               size, big_enough ? "yes" : "no");
        if (!aligned)
            bad(what, "not aligned");
        if (!big_enough)
            bad(what, "malloc_usable_size is below the size asked");
        if (zeroed) {
            bool zero = true;
            for (size_t i = 0; i < size; i++)
                zero &= ((volatile unsigned char *)p)[i] == 0;
            printf(" zero=%s", zero ? "yes" : "no");
            if (!zero)
                bad(what, "calloc's block is not zeroed");
        }
        if (size <= 4 * MIB)
            memset(p, 0x5a, size);
        if (heap_run && place == REGION && !heap_region_holds(p, size))
            bad(what, "a block of the threshold's size or more is not in the region");
        if (heap_run && place == LIBC && heap_region_holds(p, 1))
            bad(what, "the block should come from the C library");
    }
    if (want == BLOCK && !p)
        bad(what, "NULL where glibc gives a block");
    if (want != BLOCK && p)
        bad(what, "a block where glibc gives NULL");
    if (!p && want == NOMEM && err != ENOMEM)
        bad(what, "NULL without ENOMEM");
    if (!p && want == INVAL && err != EINVAL)
        bad(what, "NULL without EINVAL");
    if ((want == BLOCK || want == FREED) && err != SENTINEL)
        bad(what, "errno changed by a call that did not fail");
}

/* ---- the table: one call of one entry point per row ---- */

enum fn { F_MALLOC, F_CALLOC, F_REALLOC, F_REALLOCARRAY, F_MEMALIGN,
          F_ALIGNED_ALLOC, F_POSIX_MEMALIGN, F_VALLOC, F_PVALLOC };
static const char *const fn_name[] = {
    "malloc(", "calloc(", "realloc(NULL, ", "reallocarray(NULL, ", "memalign(",
    "aligned_alloc(", "posix_memalign(", "valloc(", "pvalloc("};

struct check {
    enum fn fn;
    size_t a, b; /* the arguments: size, or (n, size), or (align, size) */
    const char *args;
    enum want want;
    enum place place;
};
#define C1(fn, a, want, place) {fn, a, 0, #a, want, place}
#define C2(fn, a, b, want, place) {fn, a, b, #a ", " #b, want, place}

#define THR ((size_t)IVSHM_HEAP_DEFAULT_MIN)

static const struct check checks[] = {
    C1(F_MALLOC, 0, BLOCK, LIBC),
    C1(F_MALLOC, 1, BLOCK, LIBC),
    C1(F_MALLOC, 100, BLOCK, LIBC),
    C1(F_MALLOC, THR - 1, BLOCK, LIBC),
    C1(F_MALLOC, THR, BLOCK, REGION),
    C1(F_MALLOC, THR + 1, BLOCK, REGION),
    C1(F_MALLOC, 1 * MIB, BLOCK, REGION),
    C1(F_MALLOC, 2 * REGION_SIZE, BLOCK, LIBC), /* no room in the region */
    C1(F_MALLOC, SIZE_MAX / 2, NOMEM, ANY),
    C1(F_MALLOC, SIZE_MAX - 4096, NOMEM, ANY),
    C1(F_MALLOC, SIZE_MAX, NOMEM, ANY),
    C2(F_CALLOC, 0, 0, BLOCK, LIBC),
    C2(F_CALLOC, 0, 8, BLOCK, LIBC),
    C2(F_CALLOC, 8, 0, BLOCK, LIBC),
    C2(F_CALLOC, 10, 10, BLOCK, LIBC),
    C2(F_CALLOC, 1024, 1024, BLOCK, REGION),
    C2(F_CALLOC, 1, THR, BLOCK, REGION),
    C2(F_CALLOC, SIZE_MAX / 2, 1, NOMEM, ANY),
    C2(F_CALLOC, 1, SIZE_MAX, NOMEM, ANY),
    C2(F_CALLOC, SIZE_MAX, 2, NOMEM, ANY),
    C2(F_CALLOC, SIZE_MAX / 2 + 1, 2, NOMEM, ANY),
    C2(F_CALLOC, (size_t)1 << 32, (size_t)1 << 32, NOMEM, ANY),
    C1(F_REALLOC, 0, BLOCK, LIBC),
    C1(F_REALLOC, 100, BLOCK, LIBC),
    C1(F_REALLOC, 1 * MIB, BLOCK, REGION),
    C1(F_REALLOC, SIZE_MAX, NOMEM, ANY),
    C2(F_REALLOCARRAY, 0, 0, BLOCK, LIBC),
    C2(F_REALLOCARRAY, 10, 10, BLOCK, LIBC),
    C2(F_REALLOCARRAY, 1024, 1024, BLOCK, REGION),
    C2(F_REALLOCARRAY, SIZE_MAX, 2, NOMEM, ANY),
    C2(F_REALLOCARRAY, SIZE_MAX / 2 + 1, 2, NOMEM, ANY),
    /* memalign (aligned_alloc too, up to glibc 2.37): alignments up to 16
     * are malloc's, others round up to a power of two, above SIZE_MAX/2+1
     * EINVAL */
    C2(F_MEMALIGN, 0, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 1, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 3, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 8, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 16, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 24, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 48, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 64, 0, BLOCK, LIBC),
    C2(F_MEMALIGN, 100, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 4096, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 4097, 100, BLOCK, LIBC),
    C2(F_MEMALIGN, 0, THR, BLOCK, REGION),
    C2(F_MEMALIGN, 24, 1 * MIB, BLOCK, REGION),
    C2(F_MEMALIGN, 3000, 1 * MIB, BLOCK, REGION),
    C2(F_MEMALIGN, 4096, 1 * MIB, BLOCK, REGION),
    C2(F_MEMALIGN, 4097, 1 * MIB, BLOCK, LIBC), /* 8192: above a page */
    C2(F_MEMALIGN, 2 * MIB, 1 * MIB, BLOCK, LIBC),
    C2(F_MEMALIGN, 16, SIZE_MAX, NOMEM, ANY),
    C2(F_MEMALIGN, 64, SIZE_MAX / 2, NOMEM, ANY),
    C2(F_MEMALIGN, SIZE_MAX / 2 + 1, 1, NOMEM, ANY),
    C2(F_MEMALIGN, SIZE_MAX / 2 + 1 + 1, 1, INVAL, ANY),
    C2(F_MEMALIGN, SIZE_MAX, 1, INVAL, ANY),
    /* aligned_alloc: memalign's up to glibc 2.37; from 2.38 an alignment
     * that is not a power of two is refused (ODD_ALIGN). The heap serves
     * powers of two up to a page and leaves the others to glibc. */
    C2(F_ALIGNED_ALLOC, 0, 100, ODD_ALIGN, LIBC),
    C2(F_ALIGNED_ALLOC, 3, 100, ODD_ALIGN, LIBC),
    C2(F_ALIGNED_ALLOC, 48, 96, ODD_ALIGN, LIBC),
    C2(F_ALIGNED_ALLOC, 1, 100, BLOCK, LIBC),
    C2(F_ALIGNED_ALLOC, 64, 100, BLOCK, LIBC),
    C2(F_ALIGNED_ALLOC, 4096, 0, BLOCK, LIBC),
    C2(F_ALIGNED_ALLOC, 0, 1 * MIB, ODD_ALIGN, LIBC),
    C2(F_ALIGNED_ALLOC, 48, 1 * MIB, ODD_ALIGN, LIBC),
    C2(F_ALIGNED_ALLOC, 3000, 1 * MIB, ODD_ALIGN, LIBC),
    C2(F_ALIGNED_ALLOC, 16, 1 * MIB, BLOCK, REGION),
    C2(F_ALIGNED_ALLOC, 4096, 2 * MIB, BLOCK, REGION),
    C2(F_ALIGNED_ALLOC, 65536, 1 * MIB, BLOCK, LIBC),
    C2(F_ALIGNED_ALLOC, 64, SIZE_MAX, NOMEM, ANY),
    C2(F_ALIGNED_ALLOC, SIZE_MAX / 2 + 1 + 1, 1, INVAL, ANY),
    /* posix_memalign: a power of two multiple of sizeof(void *) */
    C2(F_POSIX_MEMALIGN, 0, 100, INVAL, ANY),
    C2(F_POSIX_MEMALIGN, 1, 100, INVAL, ANY),
    C2(F_POSIX_MEMALIGN, 4, 100, INVAL, ANY),
    C2(F_POSIX_MEMALIGN, 24, 100, INVAL, ANY),
    C2(F_POSIX_MEMALIGN, 48, 1 * MIB, INVAL, ANY),
    C2(F_POSIX_MEMALIGN, SIZE_MAX, 100, INVAL, ANY),
    C2(F_POSIX_MEMALIGN, 8, 0, BLOCK, LIBC),
    C2(F_POSIX_MEMALIGN, 8, 100, BLOCK, LIBC),
    C2(F_POSIX_MEMALIGN, 32, 100, BLOCK, LIBC),
    C2(F_POSIX_MEMALIGN, 4096, 100, BLOCK, LIBC),
    C2(F_POSIX_MEMALIGN, 8, 1 * MIB, BLOCK, REGION),
    C2(F_POSIX_MEMALIGN, 4096, 1 * MIB, BLOCK, REGION),
    C2(F_POSIX_MEMALIGN, 8192, 1 * MIB, BLOCK, LIBC),
    C2(F_POSIX_MEMALIGN, 64, SIZE_MAX, NOMEM, ANY),
    C2(F_POSIX_MEMALIGN, SIZE_MAX / 2 + 1, 1, NOMEM, ANY),
    C1(F_VALLOC, 0, BLOCK, LIBC),
    C1(F_VALLOC, 1, BLOCK, LIBC),
    C1(F_VALLOC, 100, BLOCK, LIBC),
    C1(F_VALLOC, 1 * MIB, BLOCK, REGION),
    C1(F_VALLOC, SIZE_MAX - 4096, NOMEM, ANY),
    C1(F_VALLOC, SIZE_MAX, NOMEM, ANY),
    C1(F_PVALLOC, 0, BLOCK, LIBC),
    C1(F_PVALLOC, 1, BLOCK, LIBC),
    C1(F_PVALLOC, 4097, BLOCK, LIBC),
    C1(F_PVALLOC, THR - 4096, BLOCK, LIBC),
    C1(F_PVALLOC, THR - 1, BLOCK, REGION), /* a page up: the threshold */
    C1(F_PVALLOC, 1 * MIB, BLOCK, REGION),
    C1(F_PVALLOC, SIZE_MAX - 4096, NOMEM, ANY),
    C1(F_PVALLOC, SIZE_MAX, NOMEM, ANY),
};

/* The call of one row; *rc: posix_memalign's return, else 0. The sizes
 * pass through a volatile so that the compiler neither folds a call nor
 * warns about a size it sees as too large. */
static void *call(const struct check *c, int *rc, int *err)
{
    volatile size_t va = c->a, vb = c->b;
    size_t a = va, b = vb;
    void *p = NULL;
    *rc = 0;
    errno = SENTINEL;
    switch (c->fn) {
    case F_MALLOC: p = malloc(a); break;
    case F_CALLOC: p = calloc(a, b); break;
    case F_REALLOC: p = realloc(NULL, a); break;
    case F_REALLOCARRAY: p = reallocarray(NULL, a, b); break;
    case F_MEMALIGN: p = memalign(a, b); break;
    case F_ALIGNED_ALLOC: p = aligned_alloc(a, b); break;
    case F_POSIX_MEMALIGN: {
        void *const untouched = (void *)&p;
        p = untouched;
        *rc = posix_memalign(&p, a, b);
        if (*rc && p != untouched)
            bad(c->args, "posix_memalign wrote *memptr on failure");
        if (*rc)
            p = NULL;
        break;
    }
    case F_VALLOC: p = valloc(a); break;
    case F_PVALLOC: p = pvalloc(a); break;
    }
    *err = errno;
    return p;
}

/* The size the block must hold, and the alignment it must have. */
static void needs(const struct check *c, size_t *size, size_t *align)
{
    *align = 16; /* glibc's MALLOC_ALIGNMENT on x86_64 */
    switch (c->fn) {
    case F_CALLOC:
    case F_REALLOCARRAY:
        *size = c->a * c->b;
        break;
    case F_MEMALIGN:
    case F_ALIGNED_ALLOC:
    case F_POSIX_MEMALIGN:
        *size = c->b;
        *align = c->a > 16 ? pow2_at_least(c->a) : 16;
        break;
    case F_VALLOC:
        *size = c->a;
        *align = page;
        break;
    case F_PVALLOC: /* what glibc 2.36 gives: the size rounded up to a
                     * page, except for 0, for which the rounding is off */
        *size = c->a ? (c->a + page - 1) / page * page : 0;
        *align = page;
        break;
    default:
        *size = c->a;
        break;
    }
}

static void run_table(void)
{
    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
        const struct check *c = &checks[i];
        char what[160];
        snprintf(what, sizeof(what), "%s%s)", fn_name[c->fn], c->args);
        int rc, err;
        void *p = call(c, &rc, &err);
        enum want want = c->want == ODD_ALIGN ? (c17_aligned_alloc ? INVAL : BLOCK) : c->want;
        size_t size, align;
        needs(c, &size, &align);
        if (c->fn == F_POSIX_MEMALIGN) {
            /* its errno on failure is glibc's side effect: compared with
             * the reference run, not asserted */
            report(what, p, err, p ? BLOCK : FAILED, size, align, c->place, false);
            int want_rc = want == BLOCK ? 0 : want == INVAL ? EINVAL : ENOMEM;
            printf(" rc=%s", err_name(rc));
            if (rc != want_rc)
                bad(what, "posix_memalign returned another code than glibc's");
        } else {
            report(what, p, err, want, size, align, c->place, c->fn == F_CALLOC);
        }
        if (c->fn == F_PVALLOC && p) /* glibc 2.36: not for pvalloc(0) */
            printf(" whole_page=%s", malloc_usable_size(p) >= page ? "yes" : "no");
        printf("\n");
        free(p);
    }
}

/* ---- the calls that take a block: realloc, reallocarray, free ---- */


/* realloc(p, size), or reallocarray(p, count, size) when count is not 0,
 * of a block holding kept bytes of pattern seed; the result (the old block
 * when realloc failed, NULL when it freed). */
static unsigned char *re(const char *what, unsigned char *p, size_t kept,
                         unsigned seed, size_t count, size_t size,
                         enum want want, enum place place)
{
    volatile size_t vc = count, vs = size;
    errno = SENTINEL;
    unsigned char *q = count ? reallocarray(p, vc, vs) : realloc(p, vs);
    int err = errno;
    if (count && __builtin_mul_overflow(count, size, &size))
        size = SIZE_MAX;
    unsigned char *now = q ? q : (want == FREED ? NULL : p);
    size_t n = kept < size ? kept : size;
    bool ok = !now || heap_intact(now, n, seed);
    if (!ok)
        bad(what, "realloc lost bytes");
    /* report() writes the block: the pattern goes back afterwards */
    report(what, q, err, want, size, 16, place, false);
    printf(" kept=%s\n", ok ? "yes" : "no");
    if (q)
        heap_fill(q, size <= 4 * MIB ? size : n, seed);
    return now;
}

static void run_realloc(void)
{
    unsigned char *p = malloc(100);
    heap_fill(p, 100, 1);
    p = re("realloc(100 B, 1 MiB)", p, 100, 1, 0, 1 * MIB, BLOCK, REGION);
    p = re("realloc(1 MiB, 2 MiB)", p, 1 * MIB, 1, 0, 2 * MIB, BLOCK, REGION);
    p = re("realloc(2 MiB, 1 MiB)", p, 2 * MIB, 1, 0, 1 * MIB, BLOCK, REGION);
    p = re("realloc(1 MiB, SIZE_MAX)", p, 1 * MIB, 1, 0, SIZE_MAX, NOMEM, ANY);
    p = re("realloc(1 MiB, SIZE_MAX/2)", p, 1 * MIB, 1, 0, SIZE_MAX / 2, NOMEM, ANY);
    p = re("realloc(1 MiB, 200)", p, 1 * MIB, 1, 0, 200, BLOCK, LIBC);
    p = re("realloc(200 B, SIZE_MAX)", p, 200, 1, 0, SIZE_MAX, NOMEM, ANY);
    p = re("realloc(200 B, 100)", p, 200, 1, 0, 100, BLOCK, LIBC);
    p = re("realloc(100 B, 0)", p, 100, 1, 0, 0, FREED, ANY);
    p = malloc(1 * MIB);
    heap_fill(p, 1 * MIB, 2);
    p = re("realloc(1 MiB, 0)", p, 1 * MIB, 2, 0, 0, FREED, ANY);
    p = malloc(200);
    heap_fill(p, 200, 3);
    p = re("reallocarray(200 B, 2048, 1 KiB)", p, 200, 3, 2048, KIB, BLOCK, REGION);
    p = re("reallocarray(2 MiB, SIZE_MAX, 1)", p, 2 * MIB, 3, SIZE_MAX, 1, NOMEM, ANY);
    p = re("reallocarray(2 MiB, SIZE_MAX, 2)", p, 2 * MIB, 3, SIZE_MAX, 2, NOMEM, ANY);
    p = re("reallocarray(2 MiB, 2, SIZE_MAX/2+1)", p, 2 * MIB, 3, 2, SIZE_MAX / 2 + 1, NOMEM, ANY);
    p = re("reallocarray(2 MiB, 1, 0)", p, 2 * MIB, 3, 1, 0, FREED, ANY);
}

static void run_free(void)
{
    const struct { const char *what; size_t size; enum place place; } kinds[] = {
        {"free(NULL)", 0, ANY},
        {"free(100 B)", 100, LIBC},
        {"free(1 MiB)", 1 * MIB, REGION},
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        void *p = kinds[i].size ? malloc(kinds[i].size) : NULL;
        if (heap_run && kinds[i].place == REGION && !heap_region_holds(p, kinds[i].size))
            bad(kinds[i].what, "the block is not in the region");
        errno = SENTINEL;
        free(p);
        printf("%s: errno=%s\n", kinds[i].what, err_name(errno));
        if (errno != SENTINEL)
            bad(kinds[i].what, "free changed errno");
    }
    size_t n = malloc_usable_size(NULL);
    printf("malloc_usable_size(NULL): %zu\n", n);
    if (n)
        bad("malloc_usable_size(NULL)", "not 0");
}

/* With --heap: the preloaded heap, over a region of our own. */
static int attach_heap(void)
{
    int (*attach)(const ivshm_heap_backend_t *) =
        (int (*)(const ivshm_heap_backend_t *))dlsym(RTLD_DEFAULT, "ivshm_heap_attach");
    stats_fn = (void (*)(ivshm_heap_stats_t *))dlsym(RTLD_DEFAULT, "ivshm_heap_stats");
    if (!attach || !stats_fn) {
        fprintf(stderr, "--heap: libivshm-heap.so is not loaded (LD_PRELOAD)\n");
        return -1;
    }
    if (heap_region_open("conform", REGION_SIZE) != 0 || attach(&heap_region_backend))
        return -1;
    ivshm_heap_stats_t s;
    stats_fn(&s);
    if (s.threshold != THR || !s.attached) {
        fprintf(stderr, "--heap: the heap's threshold is %zu, not %zu (IVSHM_HEAP_MIN set?)\n",
                s.threshold, THR);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    heap_run = argc > 1 && !strcmp(argv[1], "--heap");
    page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned major = 0, minor = 0;
    sscanf(gnu_get_libc_version(), "%u.%u", &major, &minor);
    c17_aligned_alloc = major > 2 || (major == 2 && minor >= 38) ||
                        dlsym(RTLD_DEFAULT, "heap_conform_aligned_alloc_c17");
    fprintf(stderr, "glibc %s%s: aligned_alloc %s alignments that are not powers of two\n",
            gnu_get_libc_version(),
            dlsym(RTLD_DEFAULT, "heap_conform_aligned_alloc_c17") ? " with 2.38's aligned_alloc" : "",
            c17_aligned_alloc ? "refuses" : "rounds up");
    if (heap_run && attach_heap() != 0)
        return 1;
    /* calloc must clear what a chunk held: dirty the first chunks */
    unsigned char *dirty = malloc(2 * MIB);
    memset(dirty, 0xab, 2 * MIB);
    free(dirty);
    setvbuf(stdout, NULL, _IOLBF, 0);
    run_table();
    run_realloc();
    run_free();
    if (heap_run) {
        ivshm_heap_stats_t s;
        stats_fn(&s);
        if (s.region_live)
            bad("the end", "region blocks are left after every block was freed");
        if (s.region_allocs < 20)
            bad("the end", "too few blocks came from the region");
        fprintf(stderr, "heap: %llu blocks from the region\n",
                (unsigned long long)s.region_allocs);
        size_t (*detach)(ivshm_heap_kept_fn, void *) =
            (size_t (*)(ivshm_heap_kept_fn, void *))dlsym(RTLD_DEFAULT, "ivshm_heap_detach");
        if (detach)
            detach(heap_region_keep, NULL);
        heap_region_close();
    }
    fprintf(stderr, "%s\n", failures ? "FAIL" : "all checks passed");
    return failures ? 1 : 0;
}
