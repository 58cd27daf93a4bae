/* Helpers shared by the C tests: unique region files and raw access. */
#ifndef IVSHM_TESTUTIL_H
#define IVSHM_TESTUTIL_H

#include <ivshm/ivshm.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Seconds on the monotonic clock, for the tests' bounded waits. */
static inline double tu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline const char *tu_region_path(char *buf, size_t n, const char *tag)
{
    static int seq;
    snprintf(buf, n, "/dev/shm/ivshm-test-%d-%s-%d", (int)getpid(), tag, seq++);
    return buf;
}

static inline char *tu_uri(const char *path)
{
    static char uri[300];
    snprintf(uri, sizeof(uri), "file:%s", path);
    return uri;
}

static inline ivshm_status_t tu_format(const char *path, uint64_t size,
                                       uint32_t procs, uint32_t lease_ms)
{
    ivshm_format_opts_t o;
    ivshm_format_opts_init(&o);
    o.size = size;
    if (procs)
        o.reg_slots = procs;
    if (lease_ms)
        o.lease_timeout_ms = lease_ms;
    unlink(path);
    return ivshm_format(tu_uri(path), &o);
}

/* Maps the region file raw, as a hostile or buggy VM would see it. */
static inline unsigned char *tu_map_raw(const char *path, size_t *len)
{
    *len = 0;
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return NULL;
    struct stat st;
    fstat(fd, &st);
    *len = (size_t)st.st_size;
    void *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

#endif
