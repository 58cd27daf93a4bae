/* linepp: the raw cache-line ping-pong of ivshm-lat (a release store of a
 * counter on one line, the reply on a line 128 bytes on, each side
 * spinning on an acquire load) at many places of one shared mapping, to
 * see how much the place alone moves it. Parent on CPU A, child on CPU B.
 *   linepp A B [pairs] [iters]
 * Prints, per pair k (lines at k * 64 KiB + 64 * (k % 64) and 128 bytes
 * on), the one-way ns averaged over iters round trips; then the same
 * ping-pong walking the pairs in turn (iteration i on pair i % pairs). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof(s), &s)) {
        perror("sched_setaffinity");
        exit(2);
    }
}

#define AT(base, k) ((_Atomic uint64_t *)((base) + (size_t)(k) * 65536 + 64 * ((k) % 64)))

/* one side of iters round trips on pair(s); pair of iteration i is
 * first + (walk ? i % pairs : 0) */
static double pp(char *base, int id, int first, int pairs, int walk,
                 long iters, uint64_t *ctr)
{
    uint64_t t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        int k = first + (walk ? (int)(i % pairs) : 0);
        _Atomic uint64_t *a = AT(base, k), *b = a + 16;
        uint64_t v = ++*ctr;
        if (id == 0) {
            atomic_store_explicit(a, v, memory_order_release);
            while (atomic_load_explicit(b, memory_order_acquire) != v)
                ;
        } else {
            while (atomic_load_explicit(a, memory_order_acquire) != v)
                ;
            atomic_store_explicit(b, v, memory_order_release);
        }
    }
    return (double)(now_ns() - t0) / (double)iters / 2;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: linepp A B [pairs] [iters]\n");
        return 2;
    }
    int pairs = argc > 3 ? atoi(argv[3]) : 64;
    long iters = argc > 4 ? atol(argv[4]) : 20000;
    if (pairs < 1 || iters < 10) {
        fprintf(stderr, "linepp: pairs >= 1, iters >= 10\n");
        return 2;
    }
    size_t len = (size_t)(pairs + 1) * 65536;
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    pid_t c = fork();
    int id = c == 0;
    pin(atoi(argv[1 + id]));
    /* every counter starts at 0 on both sides and moves in step: each
     * pair's words only ever hold the counter's values */
    uint64_t ctr = 0;
    double *v = malloc(sizeof(double) * (size_t)pairs);
    for (int k = 0; k < pairs; k++) {
        pp(base, id, k, 1, 0, iters / 10, &ctr); /* warm-up */
        v[k] = pp(base, id, k, 1, 0, iters, &ctr);
    }
    pp(base, id, 0, pairs, 1, iters / 10, &ctr);
    double w = pp(base, id, 0, pairs, 1, iters, &ctr);
    if (id == 0) {
        double lo = v[0], hi = v[0], sum = 0;
        for (int k = 0; k < pairs; k++) {
            printf("pair %3d %7.1f\n", k, v[k]);
            lo = v[k] < lo ? v[k] : lo;
            hi = v[k] > hi ? v[k] : hi;
            sum += v[k];
        }
        printf("# %d pairs, one at a time: min %.1f max %.1f mean %.1f ns\n",
               pairs, lo, hi, sum / pairs);
        printf("# walking the %d pairs in turn: %.1f ns\n", pairs, w);
        waitpid(c, NULL, 0);
    }
    return 0;
}
