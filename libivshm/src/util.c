/*
 * Small helpers: hashing, clocks, randomness, process liveness and the
 * bounded back-off used wherever we wait on another VM.
 */
#include "internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t ivshm__fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ivshm__now_ns(void) { return clock_ns(CLOCK_REALTIME); }

bool ivshm__cpu_prefetchw(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    /* CPUID 0x80000001, ECX bit 8: PREFETCHW (PRFCHW, 3DNowPrefetch) */
    return __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & (1u << 8));
#elif defined(__i386__)
    return false; /* no instruction emitted for it: the loops would be idle */
#else
    return true; /* the compiler's write hint (e.g. PRFM PSTL1KEEP) */
#endif
}
uint64_t ivshm__mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

void ivshm__random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = getrandom(p, n, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            /* No entropy syscall: fall back to clock and pid mixing; the
             * UUID only has to be unique among regions of one host. */
            uint64_t h = ivshm__fnv1a(&(uint64_t){ivshm__mono_ns()}, 8,
                                      IVSHM_FNV_INIT ^ (uint64_t)getpid());
            for (size_t i = 0; i < n; i++, h = h * 0x100000001b3ull + i)
                p[i] = (unsigned char)(h >> 24);
            return;
        }
        p += k;
        n -= (size_t)k;
    }
}

/* State (field 3) and start time (field 22) of pid from /proc; 0 if gone. */
static uint64_t read_stat(pid_t pid, char *state)
{
    char path[64], buf[1024];
    *state = '?';
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* comm may hold spaces and parentheses: fields resume after the last ')' */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    if (p[1] == ' ' && p[2])
        *state = p[2];
    /* starttime is field 22; after ')' we are at field 3 */
    int field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return strtoull(p, NULL, 10);
}

uint64_t ivshm__proc_start_time(pid_t pid)
{
    char state;
    return read_stat(pid, &state);
}

bool ivshm__pid_dead(uint32_t pid, uint64_t start_time)
{
    if (pid == 0)
        return false;
    if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
        return true;
    char state;
    uint64_t st = read_stat((pid_t)pid, &state);
    /* a different start time means the pid was reused: the owner is gone */
    if (st != 0 && start_time != 0 && st != start_time)
        return true;
    /* a zombie (exited, not yet reaped by its parent) maps nothing: it is
     * dead for the region, though its pid still answers kill(0) */
    return st != 0 && (state == 'Z' || state == 'X');
}

void ivshm__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void ivshm__backoff(unsigned *spins)
{
    if (*spins < 64) {
        ivshm__cpu_relax();
    } else if (*spins < 256) {
        sched_yield();
    } else {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    (*spins)++;
}

static void read_small(const char *path, char *buf, size_t n)
{
    buf[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t k = read(fd, buf, n - 1);
    close(fd);
    buf[k > 0 ? k : 0] = '\0';
}

void (*ivshm__test_step)(const char *step);
void (*ivshm__test_own)(const char *from, const char *to);

uint64_t ivshm_vm_id(void)
{
    const char *env = getenv(IVSHM_ENV_VM_ID);
    if (env && *env)
        return ivshm__fnv1a(env, strlen(env), IVSHM_FNV_INIT) | 1u;
    char buf[256];
    uint64_t h = IVSHM_FNV_INIT;
    read_small("/proc/sys/kernel/random/boot_id", buf, sizeof(buf));
    h = ivshm__fnv1a(buf, strlen(buf), h);
    /* Simulated VMs share a kernel: their namespaces tell them apart. The
     * pid namespace too: a VM id is the scope of a pid table, and a gc
     * judges pids of its own VM by its own /proc (docs/lifetimes.md), so
     * two containers with private pid namespaces are two VMs even when
     * they share the network and host name. */
    static const char *const ns[] = {"/proc/self/ns/net", "/proc/self/ns/uts",
                                     "/proc/self/ns/pid"};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        struct stat st;
        if (stat(ns[i], &st) == 0)
            h = ivshm__fnv1a(&st.st_ino, sizeof(st.st_ino), h);
    }
    if (gethostname(buf, sizeof(buf)) == 0) {
        buf[sizeof(buf) - 1] = '\0';
        h = ivshm__fnv1a(buf, strlen(buf), h);
    }
    return h | 1u; /* never 0: 0 marks "unknown" */
}
