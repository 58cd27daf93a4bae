/* The BTL's lock under MPI_THREAD_MULTIPLE (btl_ivshmem_lock.h). */
#include "btl_ivshmem_lock.h"

#include <sched.h>

static __thread unsigned depth; /* this thread's holds of the lock */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

bool ivshmem_lock_try(int *word)
{
    if (depth == 0 && (__atomic_load_n(word, __ATOMIC_RELAXED) ||
                       __atomic_exchange_n(word, 1, __ATOMIC_ACQUIRE)))
        return false;
    depth++;
    return true;
}

void ivshmem_lock_take(int *word)
{
    for (unsigned spins = 0; !ivshmem_lock_try(word); spins++) {
        if (spins < 64)
            cpu_relax();
        else
            sched_yield(); /* the holder may be waiting for this CPU */
    }
}

void ivshmem_lock_give(int *word)
{
    if (--depth == 0)
        __atomic_store_n(word, 0, __ATOMIC_RELEASE);
}
