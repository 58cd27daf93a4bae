/* Shared by the fuzz targets: a formatted region in a memfd (no file
 * system), small tables so that every input reaches them quickly. */
#ifndef IVSHM_FUZZ_SETUP_H
#define IVSHM_FUZZ_SETUP_H

#include <ivshm/ivshm.h>

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Formats a memfd region of size bytes (lease_ms 0: the default); returns
 * its fd and writes its URI. Aborts on failure: there is nothing to fuzz. */
static inline int fuzz_format_memfd(size_t size, char *uri, size_t n,
                                    uint32_t lease_ms)
{
    int fd = memfd_create("ivshm-fuzz", 0);
    if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
        abort();
    snprintf(uri, n, "file:/proc/self/fd/%d", fd);
    ivshm_format_opts_t o;
    ivshm_format_opts_init(&o);
    o.chunk_size = 4096;
    o.reg_slots = 8;
    o.job_slots = 4;
    if (lease_ms)
        o.lease_timeout_ms = lease_ms;
    if (ivshm_format(uri, &o) != IVSHM_OK)
        abort();
    return fd;
}

#endif
