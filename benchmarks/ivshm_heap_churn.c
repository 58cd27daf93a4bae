/*
 * ivshm-heap-churn: the region heap under replacement churn. The heap
 * (libivshm-heap) is linked ahead of the C library, as under LD_PRELOAD,
 * and given a backend over a real region (a /dev/shm file), as the MPI
 * component gives it. A set of live large blocks is kept; each round frees
 * one at random and allocates another of a random size. Prints how much
 * the process grew (VmSize), the size of the heap's table of large blocks,
 * and the distribution of the time of one malloc: on the wall clock, and
 * on the thread's CPU clock, which leaves out the time the thread was not
 * running (a loaded machine's preemptions), so that its maximum is the
 * heap's own work.
 *
 *   ivshm-heap-churn [--rounds N] [--live N] [--region MIB]
 *
 * docs/heap.md ("The table") gives the figures and the command.
 */
#include "../tests/heap_region.h"

#include <getopt.h>
#include <time.h>

static uint64_t now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint32_t clamp32(uint64_t v) { return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

static int by_value(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void print_dist(const char *what, uint32_t *ns, long n)
{
    qsort(ns, (size_t)n, sizeof(*ns), by_value);
    printf("%s: median %u, p99 %u, p99.99 %u, max %u\n", what, ns[n / 2],
           ns[(size_t)((double)n * 0.99)], ns[(size_t)((double)n * 0.9999)],
           ns[n - 1]);
}

/* mmap, not malloc: the benchmark's own memory stays out of the heap */
static void *map(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

int main(int argc, char **argv)
{
    long rounds = 4000000, live = 64, region_mib = 256;
    static const struct option opts[] = {
        {"rounds", required_argument, NULL, 'n'},
        {"live", required_argument, NULL, 'l'},
        {"region", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (c) {
        case 'n': rounds = atol(optarg); break;
        case 'l': live = atol(optarg); break;
        case 'r': region_mib = atol(optarg); break;
        default:
            fprintf(stderr, "usage: %s [--rounds N] [--live N] [--region MIB]\n",
                    argv[0]);
            return 2;
        }
    }
    /* blocks of 1 to 4 chunks: the live set must fit the region */
    if (rounds < 1 || live < 1 || live * 4 * 64 > region_mib * 1024) {
        fprintf(stderr, "need rounds >= 1 and live * 256 KiB <= the region\n");
        return 2;
    }
    if (heap_region_open("churn", (uint64_t)region_mib << 20) != 0 ||
        ivshm_heap_attach(&heap_region_backend) != 0)
        return 1;
    char **blk = map((size_t)live * sizeof(*blk));
    uint32_t *ns = map((size_t)rounds * sizeof(*ns));
    uint32_t *cpu_ns = map((size_t)rounds * sizeof(*cpu_ns));
    unsigned seed = 1;
    for (long i = 0; i < live; i++)
        blk[i] = malloc((size_t)(1 + i % 4) << 16);
    size_t vm0 = heap_vm_kib(), most = 0;
    long outside = 0;
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (long r = 0; r < rounds; r++) {
        long k = (long)(rand_r(&seed) % (unsigned)live);
        size_t len = (size_t)(1 + rand_r(&seed) % 4) << 16;
        free(blk[k]);
        uint64_t c = now_ns(CLOCK_THREAD_CPUTIME_ID), a = now_ns(CLOCK_MONOTONIC);
        blk[k] = malloc(len);
        ns[r] = clamp32(now_ns(CLOCK_MONOTONIC) - a);
        cpu_ns[r] = clamp32(now_ns(CLOCK_THREAD_CPUTIME_ID) - c);
        outside += !heap_region_holds(blk[k], len);
        if (r % 65536 == 0) {
            ivshm_heap_stats_t s;
            ivshm_heap_stats(&s);
            most = s.table_slots > most ? s.table_slots : most;
        }
    }
    double secs = (double)(now_ns(CLOCK_MONOTONIC) - t0) * 1e-9;
    size_t vm1 = heap_vm_kib();
    ivshm_heap_stats_t s;
    ivshm_heap_stats(&s);
    most = s.table_slots > most ? s.table_slots : most;
    printf("rounds %ld, live blocks %ld, %.2f s (%.0f ns a round)\n", rounds,
           live, secs, secs * 1e9 / (double)rounds);
    printf("VmSize: %zu KiB before, %zu KiB after: grew %ld KiB\n", vm0, vm1,
           (long)vm1 - (long)vm0);
    printf("table: %zu slots at most, %zu at the end\n", most, s.table_slots);
    print_dist("malloc ns (wall)", ns, rounds);
    print_dist("malloc ns (on CPU)", cpu_ns, rounds);
    if (outside)
        printf("blocks outside the region: %ld (the region was full)\n", outside);
    for (long i = 0; i < live; i++)
        free(blk[i]);
    ivshm_heap_detach(heap_region_keep, NULL);
    heap_region_close();
    return 0;
}
