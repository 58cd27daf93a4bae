/*
 * The BTL's lock under MPI_THREAD_MULTIPLE (docs/channels.md, "Threads"):
 * one word, recursive within a thread. Taking it uncontended is one atomic
 * exchange and giving it back one store; a thread that finds it held spins
 * briefly, then yields its CPU until it is free. One lock per process: the
 * depth that makes it recursive is this thread's, kept in the .c file.
 * No Open MPI here, so tests/unit/test_btl_lock runs it under TSan.
 */
#ifndef BTL_IVSHMEM_LOCK_H
#define BTL_IVSHMEM_LOCK_H

#include <stdbool.h>

/* word: 0 free, 1 held */
void ivshmem_lock_take(int *word);
/* takes it only if it is free or already this thread's */
bool ivshmem_lock_try(int *word);
void ivshmem_lock_give(int *word);

#endif
