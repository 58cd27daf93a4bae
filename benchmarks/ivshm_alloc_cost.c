/*
 * ivshm-alloc-cost: what one allocation from the region costs, by size:
 * ivshm_alloc, one write to every page (what the new owner does first),
 * ivshm_free. The allocator zeroes every allocation for its new owner
 * (docs/lifetimes.md, "Scrub"), so this is the price of that scrub; the
 * same source built against an older tree gives the price without it.
 * Prints, per size, the median and the mean over --reps rounds in
 * microseconds, and the bytes per second of the median.
 *
 *   ivshm-alloc-cost [--region MIB] [--reps N] [--path FILE]
 *
 * Uses only the public API (ivshm/ivshm.h), so that it builds against
 * every tree that has it.
 */
#include <ivshm/ivshm.h>

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    unsigned region_mib = 256, reps = 201;
    const char *path = "/dev/shm/ivshm-alloc-cost";
    static const struct option opts[] = {{"region", required_argument, 0, 'r'},
                                         {"reps", required_argument, 0, 'n'},
                                         {"path", required_argument, 0, 'p'},
                                         {0, 0, 0, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 'r')
            region_mib = (unsigned)strtoul(optarg, NULL, 0);
        else if (c == 'n')
            reps = (unsigned)strtoul(optarg, NULL, 0);
        else if (c == 'p')
            path = optarg;
        else {
            fprintf(stderr, "usage: %s [--region MIB] [--reps N] [--path FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!reps || region_mib < 16) {
        fprintf(stderr, "ivshm-alloc-cost: --reps >= 1, --region >= 16\n");
        return 2;
    }
    char uri[512];
    snprintf(uri, sizeof(uri), "file:%s", path);
    ivshm_format_opts_t o;
    ivshm_format_opts_init(&o);
    o.size = (uint64_t)region_mib << 20;
    o.force = 1;
    ivshm_region_t *r;
    if (ivshm_format(uri, &o) != IVSHM_OK ||
        ivshm_region_open(uri, 0, &r) != IVSHM_OK || ivshm_attach(r) != IVSHM_OK) {
        fprintf(stderr, "ivshm-alloc-cost: %s\n", ivshm_last_error());
        unlink(path);
        return 1;
    }
    double *t = calloc(reps, sizeof(*t));
    long page = sysconf(_SC_PAGESIZE);
    printf("%10s %12s %12s %10s\n", "bytes", "median_us", "mean_us", "GB/s");
    int rc = 0;
    for (uint64_t size = 64 << 10; size <= 4 << 20 && !rc; size *= 4) {
        double sum = 0;
        for (unsigned i = 0; i < reps; i++) {
            uint64_t off;
            double t0 = now_us();
            if (ivshm_alloc(r, size, &off) != IVSHM_OK) {
                fprintf(stderr, "ivshm-alloc-cost: %s\n", ivshm_last_error());
                rc = 1;
                break;
            }
            volatile char *p = (char *)ivshm_region_base(r) + off;
            for (uint64_t k = 0; k < size; k += (uint64_t)page)
                p[k] = 1;
            ivshm_free(r, off);
            t[i] = now_us() - t0;
            sum += t[i];
        }
        if (rc)
            break;
        qsort(t, reps, sizeof(*t), by_value);
        double med = t[reps / 2];
        printf("%10llu %12.2f %12.2f %10.1f\n", (unsigned long long)size, med,
               sum / reps, (double)size / (med * 1e3));
    }
    free(t);
    ivshm_region_close(r);
    unlink(path);
    return rc;
}
