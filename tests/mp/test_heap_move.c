/*
 * Region blocks moving to private memory while the program runs: a fork
 * child gets the parent's memory as of the fork, not the parent's later
 * writes; detaching (MPI_Finalize) loses no write that other threads make
 * while blocks move, and a real crash during the move is still a crash.
 * The heap is linked ahead of the C library over a real region, as in
 * test_heap.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../testutil.h"
#include "../heap_region.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/wait.h>

#define MIB (1u << 20)
#define PAGE 4096u
#define REGION_SIZE (160u * MIB)

/* This process' own lease on the region, and the heap on it. */
static int join_region(void)
{
    if (ivshm_region_open(tu_uri(heap_region_path), 0, &heap_region) != IVSHM_OK || ivshm_attach(heap_region) != IVSHM_OK)
        return -1;
    return ivshm_heap_attach(&heap_region_backend);
}

static int setup(void **state)
{
    (void)state;
    tu_region_path(heap_region_path, sizeof(heap_region_path), "heapmove");
    if (tu_format(heap_region_path, REGION_SIZE, 16, 5000) != IVSHM_OK)
        return -1;
    return join_region();
}

static int teardown(void **state)
{
    (void)state;
    ivshm_heap_detach(heap_region_keep, NULL);
    if (heap_region)
        ivshm_region_close(heap_region);
    heap_region = NULL;
    unlink(heap_region_path);
    return 0;
}

/* Bytes of [p, p + len) that differ from c, counted by page. */
static size_t pages_not(const unsigned char *p, size_t len, unsigned char c)
{
    size_t bad = 0;
    for (size_t pg = 0; pg < len; pg += PAGE)
        for (size_t i = pg; i < pg + PAGE && i < len; i++)
            if (p[i] != c) {
                bad++;
                break;
            }
    return bad;
}

static void read_all(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    assert_int_equal(got, n);
}

/* ---- fork: the child holds the parent's memory as of the fork ---- */

/* The parent writes its 64 MiB block with one pattern, forks, and at once
 * rewrites the whole block with another, last page first; only then may
 * the child look. A child whose copy is made after fork returns in it
 * copies while the parent writes, and finds the second pattern in the
 * pages the parent reached first. */
static void test_fork_child_sees_fork_time(void **state)
{
    (void)state;
    const size_t len = 64 * MIB;
    unsigned char *p = malloc(len);
    assert_true(heap_region_holds(p, len));
    memset(p, 0xa1, len);
    int go[2], res[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(res), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* a fault ends it, not cmocka's handler */
        char c;
        if (read(go[0], &c, 1) != 1)
            _exit(2);
        size_t changed = pages_not(p, len, 0xa1);
        (void)!write(res[1], &changed, sizeof(changed));
        _exit(0);
    }
    close(go[0]);
    close(res[1]); /* a child that dies says nothing: read_all fails */
    for (size_t off = len; off; off -= PAGE)
        memset(p + off - PAGE, 0xb2, PAGE);
    assert_int_equal(write(go[1], "g", 1), 1);
    size_t changed = SIZE_MAX;
    read_all(res[0], &changed, sizeof(changed));
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (changed)
        print_message("the child saw %zu of %zu pages with the parent's writes "
                      "made after the fork\n", changed, len / PAGE);
    assert_int_equal(changed, 0);
    assert_int_equal(pages_not(p, len, 0xb2), 0); /* the parent's own */
    free(p);
    close(go[1]);
    close(res[0]);
}

static long vm_pages(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = -1;
    if (f) {
        if (fscanf(f, "%ld", &size) != 1)
            size = -1;
        fclose(f);
    }
    return size;
}

/* The copies made for the child at fork are the child's: the parent keeps
 * none of them, however often it forks; the child frees and writes its
 * copy as private memory. */
static void test_fork_parent_keeps_no_copy(void **state)
{
    (void)state;
    const size_t len = 16 * MIB;
    unsigned char *p = malloc(len);
    assert_true(heap_region_holds(p, len));
    memset(p, 0x5c, len);
    long before = vm_pages();
    for (int i = 0; i < 4; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            signal(SIGSEGV, SIG_DFL);
            int rc = pages_not(p, len, 0x5c) ? 3 : 0;
            memset(p, 0x11, len);
            free(p);
            _exit(rc);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(vm_pages(), before);
    assert_int_equal(pages_not(p, len, 0x5c), 0);
    free(p);
}

/* ---- detach: no write lost while blocks move ---- */

enum { BLOCKS = 4, WRITERS = 3 };
#define BLOCK_LEN (16u * MIB)
#define PAGES (BLOCKS * BLOCK_LEN / PAGE) /* 16,384 */

static unsigned char *blk[BLOCKS];
static uint64_t last_written[PAGES]; /* static: not a heap block itself */
static atomic_int stop_writers;
static atomic_ulong passes[WRITERS];

static volatile uint64_t *page_word(size_t i)
{
    return (volatile uint64_t *)(blk[i / (BLOCK_LEN / PAGE)] + (i % (BLOCK_LEN / PAGE)) * PAGE);
}

/* Writer w owns pages w, w + WRITERS, ...; each pass checks that every
 * one of them still holds the value it wrote there last (a lost write
 * shows as an older value), writes a new value and records it. */
static atomic_ulong lost_writes;

static void *writer(void *arg)
{
    unsigned w = (unsigned)(uintptr_t)arg;
    for (uint64_t pass = 1; !atomic_load(&stop_writers); pass++) {
        for (size_t i = w; i < PAGES; i += WRITERS) {
            if (*page_word(i) != last_written[i])
                atomic_fetch_add(&lost_writes, 1);
            uint64_t v = pass << 8 | w;
            *page_word(i) = v;
            last_written[i] = v;
        }
        atomic_fetch_add(&passes[w], 1);
    }
    return NULL;
}

static void wait_passes(unsigned long n)
{
    unsigned long base[WRITERS];
    for (int w = 0; w < WRITERS; w++)
        base[w] = atomic_load(&passes[w]);
    for (int w = 0; w < WRITERS; w++)
        while (atomic_load(&passes[w]) < base[w] + n)
            sched_yield();
}

static void test_detach_loses_no_write(void **state)
{
    (void)state;
    for (int b = 0; b < BLOCKS; b++) {
        blk[b] = malloc(BLOCK_LEN);
        assert_true(heap_region_holds(blk[b], BLOCK_LEN));
        memset(blk[b], 0, BLOCK_LEN);
    }
    memset(last_written, 0, sizeof(last_written));
    atomic_store(&lost_writes, 0);
    atomic_store(&stop_writers, 0);
    pthread_t th[WRITERS];
    for (int w = 0; w < WRITERS; w++)
        assert_int_equal(pthread_create(&th[w], NULL, writer, (void *)(uintptr_t)w), 0);
    wait_passes(2);
    unsigned long before = 0, after = 0;
    for (int w = 0; w < WRITERS; w++)
        before += atomic_load(&passes[w]);
    assert_int_equal(ivshm_heap_detach(heap_region_keep, NULL), BLOCKS);
    for (int w = 0; w < WRITERS; w++)
        after += atomic_load(&passes[w]);
    wait_passes(2);
    atomic_store(&stop_writers, 1);
    for (int w = 0; w < WRITERS; w++)
        pthread_join(th[w], NULL);
    for (size_t i = 0; i < PAGES; i++)
        if (*page_word(i) != last_written[i])
            atomic_fetch_add(&lost_writes, 1);
    unsigned long lost = atomic_load(&lost_writes);
    if (lost)
        print_message("%lu writes into %u pages were lost\n", lost, PAGES);
    assert_int_equal(lost, 0);
    assert_true(after > before); /* they wrote while the blocks moved */
    ivshm_region_close(heap_region); /* the blocks are private: they stay */
    heap_region = NULL;
    for (size_t i = 0; i < PAGES; i++)
        assert_true(*page_word(i) == last_written[i]);
    for (int b = 0; b < BLOCKS; b++)
        free(blk[b]);
}

/* ---- a real crash while blocks move is still a crash ---- */

static int crash_pipe[2];
static struct sigaction app_action;

/* 'h': the fault's own, passed on by the heap's handler during the move
 * (still in place), not only once the move is over */
static void app_handler(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    struct sigaction now;
    sigaction(SIGSEGV, NULL, &now);
    bool chained = now.sa_sigaction != app_handler;
    (void)!write(crash_pipe[1], si->si_addr != (void *)16 ? "?" : chained ? "h" : "l", 1);
    _exit(42);
}

/* Once the heap's fault handler is in place (a move under way), write
 * through a bad pointer. */
static void *crasher(void *arg)
{
    (void)arg;
    double end = tu_now_s() + 20;
    while (tu_now_s() < end) {
        struct sigaction now;
        sigaction(SIGSEGV, NULL, &now);
        if (now.sa_sigaction != app_action.sa_sigaction) {
            (void)!write(crash_pipe[1], "s", 1);
            volatile uintptr_t bad = 16; /* opaque to the compiler */
            *(volatile int *)bad = 1;
        }
    }
    return NULL;
}

/* The child takes its own lease, fills blocks and detaches, again and
 * again, until the crasher strikes during a move. */
static void crash_child(bool with_app_handler)
{
    /* the application's handler, or the default (not cmocka's) */
    memset(&app_action, 0, sizeof(app_action));
    if (with_app_handler) {
        app_action.sa_sigaction = app_handler;
        app_action.sa_flags = SA_SIGINFO;
    }
    sigemptyset(&app_action.sa_mask);
    sigaction(SIGSEGV, &app_action, NULL);
    sigaction(SIGSEGV, NULL, &app_action);
    pthread_t th;
    if (pthread_create(&th, NULL, crasher, NULL))
        _exit(3);
    heap_region = NULL; /* the parent's handle and lease stay the parent's */
    for (int round = 0; round < 20; round++) {
        if (heap_region)
            ivshm_region_close(heap_region);
        if (join_region())
            _exit(4);
        unsigned char *b[BLOCKS];
        for (int i = 0; i < BLOCKS; i++) {
            b[i] = malloc(BLOCK_LEN);
            memset(b[i], i, BLOCK_LEN);
        }
        ivshm_heap_detach(NULL, NULL);
        for (int i = 0; i < BLOCKS; i++)
            free(b[i]);
    }
    _exit(21); /* the crasher never saw a move */
}

/* Waits up to 30 s for the child; false (and the child killed) when it
 * did not end. Its wait status in *st. */
static bool child_ended(pid_t pid, int *st)
{
    double end = tu_now_s() + 30;
    pid_t got;
    while ((got = waitpid(pid, st, WNOHANG)) == 0 && tu_now_s() < end)
        usleep(10000);
    if (got != 0)
        return true;
    kill(pid, SIGKILL);
    waitpid(pid, st, 0);
    return false;
}

static void crash_during_move(bool with_app_handler)
{
    assert_int_equal(pipe(crash_pipe), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        crash_child(with_app_handler);
    close(crash_pipe[1]);
    int st = 0;
    if (!child_ended(pid, &st))
        fail_msg("the child neither crashed nor ended in 30 s");
    char seen[4] = {0};
    ssize_t n = read(crash_pipe[0], seen, sizeof(seen) - 1);
    close(crash_pipe[0]);
    print_message("child: %s %d, saw \"%s\"\n", WIFSIGNALED(st) ? "signal" : "exit",
                  WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), n > 0 ? seen : "");
    assert_true(n >= 1 && seen[0] == 's'); /* it faulted during a move */
    if (with_app_handler) {
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 42);
        assert_string_equal(seen, "sh");
    } else {
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    }
}

/* A signal handler of the application (a sampling profiler's) that
 * writes live blocks, on the very thread that moves them: the move must
 * neither wait for itself (the handler faulting on the block being
 * copied) nor lose the handler's writes. A pinger thread signals the
 * mover all through the detach; each signal writes its count into every
 * block. */
static unsigned char *sig_blk[BLOCKS];
static volatile sig_atomic_t sig_count;
static atomic_int sig_stop;
static pthread_t sig_mover;

static void sig_writer(int sig)
{
    (void)sig;
    sig_count++;
    for (int i = 0; i < BLOCKS; i++)
        for (size_t o = 0; o < BLOCK_LEN; o += 64 * PAGE)
            sig_blk[i][o] = (unsigned char)sig_count;
}

static void *pinger(void *arg)
{
    (void)arg;
    while (!atomic_load(&sig_stop)) {
        pthread_kill(sig_mover, SIGUSR1);
        usleep(50);
    }
    return NULL;
}

static void signal_child(void)
{
    struct sigaction sa = {.sa_handler = sig_writer, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    heap_region = NULL; /* the parent's handle and lease stay the parent's */
    for (int round = 0; round < 10; round++) {
        if (heap_region)
            ivshm_region_close(heap_region);
        if (join_region())
            _exit(4);
        for (int i = 0; i < BLOCKS; i++) {
            sig_blk[i] = malloc(BLOCK_LEN);
            memset(sig_blk[i], 0, BLOCK_LEN);
        }
        sig_mover = pthread_self();
        atomic_store(&sig_stop, 0);
        pthread_t th;
        if (pthread_create(&th, NULL, pinger, NULL))
            _exit(3);
        usleep(2000);
        ivshm_heap_detach(NULL, NULL);
        atomic_store(&sig_stop, 1);
        pthread_join(th, NULL);
        /* the handler's last writes are in every block */
        unsigned char last = (unsigned char)sig_count;
        sig_writer(0); /* no signal now: one more pass, checked below */
        last = (unsigned char)(last + 1);
        for (int i = 0; i < BLOCKS; i++)
            for (size_t o = 0; o < BLOCK_LEN; o += 64 * PAGE)
                if (sig_blk[i][o] != last)
                    _exit(5);
        for (int i = 0; i < BLOCKS; i++)
            free(sig_blk[i]);
    }
    _exit(sig_count > 0 ? 0 : 6);
}

static void test_signal_handler_writes_during_move(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        signal_child();
    int st = 0;
    if (!child_ended(pid, &st))
        fail_msg("a signal handler writing a moving block on the moving "
                 "thread: the detach did not end in 30 s");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("the child ended with %s %d (5: a block lost the handler's "
                 "writes)",
                 WIFSIGNALED(st) ? "signal" : "exit",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

static void test_crash_during_move_kills(void **state)
{
    (void)state;
    crash_during_move(false);
}

static void test_crash_during_move_reaches_app_handler(void **state)
{
    (void)state;
    crash_during_move(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fork_child_sees_fork_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_parent_keeps_no_copy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_detach_loses_no_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_during_move_kills, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_during_move_reaches_app_handler, setup, teardown),
        cmocka_unit_test_setup_teardown(test_signal_handler_writes_during_move, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
