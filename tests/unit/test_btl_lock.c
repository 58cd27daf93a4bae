/*
 * The BTL's lock under MPI_THREAD_MULTIPLE (mpi-plugin/btl/btl_ivshmem_lock.c),
 * with real threads: recursion within a thread, exclusion between threads,
 * and counters that threads change only under it, taken as senders do
 * (take) and as progress does (try, and return when it is held). The
 * counters are plain ints: a lock that let two threads in would lose
 * updates here and is a data race under TSan (scripts/test.sh runs this
 * test in its TSan build).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../mpi-plugin/btl/btl_ivshmem_lock.h"

#include <pthread.h>

static int word;

static void *try_from_other_thread(void *arg)
{
    bool got = ivshmem_lock_try(&word);
    if (got)
        ivshmem_lock_give(&word);
    *(bool *)arg = got;
    return NULL;
}

static bool other_thread_gets_it(void)
{
    bool got = false;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, try_from_other_thread, &got), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    return got;
}

static void recursive_within_a_thread(void **state)
{
    (void)state;
    ivshmem_lock_take(&word);
    ivshmem_lock_take(&word); /* a callback made under the lock sends */
    assert_true(ivshmem_lock_try(&word)); /* and progresses */
    ivshmem_lock_give(&word);
    ivshmem_lock_give(&word);
    assert_false(other_thread_gets_it()); /* still held once */
    ivshmem_lock_give(&word);
    assert_true(other_thread_gets_it());
    assert_int_equal(word, 0);
}

#define THREADS 4
#define ROUNDS 200000
static int guarded, nested; /* changed only under the lock */
static int tried;           /* try's successes, counted under the lock */
static pthread_barrier_t start; /* all threads contend from the first round */

static void *worker(void *arg)
{
    int progress_like = (int)(intptr_t)arg % 2;
    pthread_barrier_wait(&start);
    for (int i = 0; i < ROUNDS; i++) {
        if (progress_like) {
            if (!ivshmem_lock_try(&word)) {
                i--; /* held: a progress pass returns, this one retries */
                continue;
            }
            tried++;
        } else {
            ivshmem_lock_take(&word);
        }
        guarded++;
        if (i % 7 == 0) { /* a receive callback that sends */
            ivshmem_lock_take(&word);
            nested++;
            ivshmem_lock_give(&word);
        }
        ivshmem_lock_give(&word);
    }
    return NULL;
}

static void excludes_other_threads(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
    for (intptr_t k = 0; k < THREADS; k++)
        assert_int_equal(pthread_create(&t[k], NULL, worker, (void *)k), 0);
    for (int k = 0; k < THREADS; k++)
        assert_int_equal(pthread_join(t[k], NULL), 0);
    pthread_barrier_destroy(&start);
    assert_int_equal(guarded, THREADS * ROUNDS);
    assert_int_equal(tried, THREADS / 2 * ROUNDS);
    assert_int_equal(nested, THREADS * ((ROUNDS + 6) / 7));
    assert_int_equal(word, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(recursive_within_a_thread),
        cmocka_unit_test(excludes_other_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
