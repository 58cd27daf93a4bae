/*
 * OpenSHMEM put, get and atomics with every payload checked, for oshrun
 * across simulated VMs (tests/simvm/test_oshmem.sh): each PE puts to the
 * next PE and gets from it at sizes around the transport's protocol
 * boundaries (put/get short 256 B, bcopy 32 KiB, zcopy above), and every
 * PE works on PE 0's words with 32- and 64-bit add, fetch-add, swap, and,
 * or, xor and 64-bit compare-swap. Prints one line per failure and a
 * summary; exits 1 if anything failed.
 *
 * The words live in the symmetric heap (in the region): static variables
 * are private memory, which UCP reaches by its software atomics.
 *
 * Left out, as Open MPI 4.1.4 gets them wrong over any UCX transport
 * (UCX_TLS=self,tcp alike, docs/ucx.md): 32-bit compare-swap
 * (shmem_int_atomic_compare_swap overruns its own stack) and fetch-xor
 * (shmem_ulonglong_atomic_fetch_xor stores its value, as a swap would).
 */
#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE (4u << 20)

static int me, npes, passed, failed;

static void check(int ok, const char *what, size_t size)
{
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("shmem_check: PE %d: FAIL %s (%zu bytes)\n", me, what, size);
    }
}

static unsigned char pattern(int pe, size_t size, size_t i)
{
    return (unsigned char)(pe * 31 + size * 7 + i * 13 + (i >> 8));
}

static void t_put_get(unsigned char *src, unsigned char *dst)
{
    static const size_t sizes[] = {1, 8, 255, 256, 257, 4096, 8192,
                                   32767, 32768, 32769, 65536, 262144,
                                   1u << 20, MAX_SIZE};
    int next = (me + 1) % npes, prev = (me + npes - 1) % npes;
    unsigned char *local = malloc(MAX_SIZE); /* private: the local side */
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        for (size_t i = 0; i < n; i++)
            local[i] = pattern(me, n, i);
        memset(dst, 0, n);
        shmem_barrier_all();
        /* from private memory into the next PE's symmetric buffer */
        shmem_putmem(dst, local, n, next);
        shmem_barrier_all();
        int ok = 1;
        for (size_t i = 0; i < n && ok; i++)
            ok = dst[i] == pattern(prev, n, i);
        check(ok, "shmem_putmem", n);
        /* from the next PE's symmetric buffer into private memory */
        for (size_t i = 0; i < n; i++)
            src[i] = pattern(me, n, i ^ 1);
        shmem_barrier_all();
        memset(local, 0, n);
        shmem_getmem(local, src, n, next);
        ok = 1;
        for (size_t i = 0; i < n && ok; i++)
            ok = local[i] == pattern(next, n, i ^ 1);
        check(ok, "shmem_getmem", n);
        shmem_barrier_all();
    }
    free(local);
}

/* PE 0's words, in the symmetric heap */
struct words {
    long long c64, s64, lock64;
    unsigned long long bits64;
    int c32, s32;
    unsigned int bits32;
};
static struct words *wd;
#define c64 (wd->c64)
#define s64 (wd->s64)
#define lock64 (wd->lock64)
#define bits64 (wd->bits64)
#define c32 (wd->c32)
#define s32 (wd->s32)
#define bits32 (wd->bits32)

static void t_atomics(void)
{
    const int rounds = 200;
    long long sum = 0;
    c64 = 0; c32 = 0; s64 = -1; s32 = -1; lock64 = -1;
    bits64 = 0xffffffffull; bits32 = 0xffffu;
    shmem_barrier_all();
    for (int r = 0; r < rounds; r++) {
        shmem_longlong_atomic_add(&c64, me + 1, 0);
        sum += shmem_longlong_atomic_fetch_add(&c64, 1000, 0) >= 0;
        shmem_int_atomic_add(&c32, me + 1, 0);
        sum += shmem_int_atomic_fetch_add(&c32, 1000, 0) >= 0;
    }
    check(sum == 2 * rounds, "fetch-add results", 8);
    /* compare-swap: each PE takes the lock word once, in turn */
    while (shmem_longlong_atomic_compare_swap(&lock64, me - 1, me, 0) != me - 1)
        ;
    long long old64 = shmem_longlong_atomic_swap(&s64, me, 0);
    int old32 = shmem_int_atomic_swap(&s32, me, 0);
    check(old64 >= -1 && old64 < npes && old64 != me, "swap 64", 8);
    check(old32 >= -1 && old32 < npes && old32 != me, "swap 32", 4);
    /* bitwise: each PE clears its bit by and, sets bit 32+me by or, flips
     * bit 48+me twice by xor */
    shmem_ulonglong_atomic_and(&bits64, ~(1ull << me), 0);
    shmem_uint_atomic_and(&bits32, ~(1u << me), 0);
    shmem_ulonglong_atomic_or(&bits64, 1ull << (32 + me), 0);
    shmem_uint_atomic_or(&bits32, 1u << (16 + me), 0);
    shmem_ulonglong_atomic_xor(&bits64, 1ull << (48 + me), 0);
    shmem_ulonglong_atomic_xor(&bits64, 1ull << (48 + me), 0);
    shmem_uint_atomic_xor(&bits32, 1u << (24 + me), 0);
    shmem_uint_atomic_xor(&bits32, 1u << (24 + me), 0);
    shmem_barrier_all();
    if (me == 0) {
        long long want64 = 0;
        for (int p = 0; p < npes; p++)
            want64 += (long long)rounds * (p + 1 + 1000);
        check(c64 == want64, "64-bit add and fetch-add total", 8);
        check(c32 == (int)want64, "32-bit add and fetch-add total", 4);
        check(lock64 == npes - 1, "compare-swap chain", 8);
        unsigned long long w64 = 0xffffffffull;
        unsigned int w32 = 0xffffu;
        for (int p = 0; p < npes; p++) {
            w64 = (w64 & ~(1ull << p)) | 1ull << (32 + p);
            w32 = (w32 & ~(1u << p)) | 1u << (16 + p);
        }
        check(bits64 == w64, "64-bit and/or/xor", 8);
        check(bits32 == w32, "32-bit and/or/xor", 4);
        if (bits64 != w64 || bits32 != w32)
            printf("shmem_check: bits64 %llx (want %llx) bits32 %x (want %x)\n",
                   bits64, w64, bits32, w32);
    }
}

int main(void)
{
    shmem_init();
    me = shmem_my_pe();
    npes = shmem_n_pes();
    unsigned char *src = shmem_malloc(MAX_SIZE);
    unsigned char *dst = shmem_malloc(MAX_SIZE);
    wd = shmem_malloc(sizeof(*wd));
    if (src == NULL || dst == NULL || wd == NULL) {
        printf("shmem_check: PE %d: no symmetric memory\n", me);
        shmem_global_exit(1);
    }
    t_put_get(src, dst);
    t_atomics();
    shmem_barrier_all();
    printf("shmem_check: PE %d of %d: %d passed, %d failed\n", me, npes,
           passed, failed);
    shmem_free(src);
    shmem_free(dst);
    shmem_free(wd);
    shmem_finalize();
    return failed ? 1 : 0;
}
