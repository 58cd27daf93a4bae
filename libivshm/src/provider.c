/*
 * Region providers: how a URI becomes an open file descriptor whose first
 * bytes are the shared region.
 *   file:PATH         a /dev/shm or hugetlbfs file (hosts, containers, tests)
 *   pci:auto          the only ivshmem device of this guest (BAR2 via sysfs)
 *   pci:DDDD:BB:DD.F  the ivshmem device at that address
 *   dev:auto          the only device of the guest driver (/dev/ivshmemN):
 *   dev:N, dev:PATH   same memory, plus doorbell interrupts
 *   auto              dev:auto when the guest driver is loaded, else pci:auto
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ivshmem_uapi.h"

#define IVSHM_PCI_VENDOR 0x1af4
#define IVSHM_PCI_DEVICE 0x1110

static ivshm_status_t file_open(const char *path, bool rdonly, bool create,
                                uint64_t create_size, int *fd, uint64_t *size,
                                char **resolved)
{
    if (!*path)
        return ivshm__fail(IVSHM_ERR_INVAL, "file: URI needs a path");
    int flags = (rdonly ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    if (create)
        flags |= O_CREAT;
    int f = open(path, flags, 0660);
    if (f < 0)
        return ivshm__fail_errno(errno, "cannot open region file", path);
    struct stat st;
    if (fstat(f, &st) < 0) {
        int e = errno;
        close(f);
        return ivshm__fail_errno(e, "cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return ivshm__fail(IVSHM_ERR_INVAL, "%s is not a regular file", path);
    }
    uint64_t sz = (uint64_t)st.st_size;
    if (create && create_size && sz != create_size) {
        if (ftruncate(f, (off_t)create_size) < 0) {
            int e = errno;
            close(f);
            return ivshm__fail(e == EINVAL ? IVSHM_ERR_INVAL : IVSHM_ERR_SYS,
                               "cannot size %s to %llu bytes: %s (hugetlbfs "
                               "needs a multiple of the huge page size)",
                               path, (unsigned long long)create_size,
                               strerror(e));
        }
        sz = create_size;
    }
    *fd = f;
    *size = sz;
    *resolved = strdup(path);
    return IVSHM_OK;
}

static const char *sysfs_root(void)
{
    const char *r = getenv("IVSHM_SYSFS_ROOT");
    return r && *r ? r : "/sys";
}

static long read_hex_file(const char *dir, const char *name)
{
    char path[512], buf[32];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return strtol(buf, NULL, 0);
}

/* sysfs resource2 maps BAR2 uncached (UC-): ordered, as the channels need.
 * resource2_wc (write-combined) is never used: WC stores may pass each
 * other, so a flag could be seen before the data it publishes. Where the
 * hypervisor ignores the guest's memory type (KVM on Intel without
 * non-coherent DMA) the mapping is write-back anyway; the guest driver
 * (dev:) maps write-back everywhere. */
static void bar2_path(const char *dir, char *out, size_t n)
{
    snprintf(out, n, "%s/resource2", dir);
}

/* Counts the entries of dir; copies the first (by name) into name. */
static int first_entry(const char *dir, char *name, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int count = 0;
    struct dirent *e;
    name[0] = '\0';
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= n)
            continue;
        if (count++ == 0 || strcmp(e->d_name, name) < 0)
            memcpy(name, e->d_name, strlen(e->d_name) + 1);
    }
    closedir(d);
    return count;
}

int ivshm_pci_list(ivshm_pci_dev_t *devs, int max)
{
    char base[512];
    snprintf(base, sizeof(base), "%s/bus/pci/devices", sysfs_root());
    DIR *d = opendir(base);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(devs[0].addr))
            continue;
        char dir[800];
        snprintf(dir, sizeof(dir), "%s/%s", base, e->d_name);
        if (read_hex_file(dir, "vendor") != IVSHM_PCI_VENDOR ||
            read_hex_file(dir, "device") != IVSHM_PCI_DEVICE)
            continue;
        if (n < max) {
            ivshm_pci_dev_t *p = &devs[n];
            memset(p, 0, sizeof(*p));
            memcpy(p->addr, e->d_name, strlen(e->d_name) + 1);
            p->revision = (int)read_hex_file(dir, "revision");
            char res[900];
            bar2_path(dir, res, sizeof(res));
            struct stat st;
            if (stat(res, &st) == 0)
                p->size = (uint64_t)st.st_size;
            p->accessible = access(res, R_OK | W_OK) == 0;
            snprintf(res, sizeof(res), "%s/resource1", dir);
            p->has_doorbell = access(res, F_OK) == 0;
            snprintf(res, sizeof(res), "%s/ivshmem", dir);
            char name[sizeof(p->chardev) - 5];
            if (first_entry(res, name, sizeof(name)) > 0)
                snprintf(p->chardev, sizeof(p->chardev), "/dev/%s", name);
        }
        n++;
    }
    closedir(d);
    /* readdir order is arbitrary; sort by address for stable output */
    int m = n < max ? n : max;
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && strcmp(devs[j - 1].addr, devs[j].addr) > 0;
             j--) {
            ivshm_pci_dev_t t = devs[j];
            devs[j] = devs[j - 1];
            devs[j - 1] = t;
        }
    return n;
}

static ivshm_status_t pci_open(const char *rest, bool rdonly, bool create,
                               uint64_t create_size, int *fd, uint64_t *size,
                               char **resolved)
{
    (void)create_size;
    if (create)
        return ivshm__fail(IVSHM_ERR_NOTSUP,
                           "a PCI BAR cannot be created; format it in place "
                           "or format the backing file on the host");
    char addr[32];
    if (strcmp(rest, "auto") == 0 || *rest == '\0') {
        ivshm_pci_dev_t devs[16];
        int n = ivshm_pci_list(devs, 16);
        if (n == 0)
            return ivshm__fail(
                IVSHM_ERR_NODEV,
                "no ivshmem device (PCI 1af4:1110) in this machine; add "
                "'-device ivshmem-plain,memdev=...' to the VM (see "
                "qemu-config/README.md) or pass file:PATH");
        if (n > 1)
            return ivshm__fail(IVSHM_ERR_AMBIGUOUS,
                               "%d ivshmem devices found; choose one with "
                               "pci:ADDRESS (see 'ivshm list')",
                               n);
        snprintf(addr, sizeof(addr), "%s", devs[0].addr);
    } else {
        /* accept BB:DD.F as shorthand for domain 0000 */
        if (strchr(rest, ':') == strrchr(rest, ':'))
            snprintf(addr, sizeof(addr), "0000:%s", rest);
        else
            snprintf(addr, sizeof(addr), "%s", rest);
    }
    char dir[600], res[700];
    snprintf(dir, sizeof(dir), "%s/bus/pci/devices/%s", sysfs_root(), addr);
    if (access(dir, F_OK) != 0)
        return ivshm__fail(IVSHM_ERR_NOENT, "no PCI device at %s (%s)", addr,
                           dir);
    if (read_hex_file(dir, "vendor") != IVSHM_PCI_VENDOR ||
        read_hex_file(dir, "device") != IVSHM_PCI_DEVICE)
        return ivshm__fail(IVSHM_ERR_NODEV,
                           "PCI device %s is not an ivshmem device (1af4:1110)",
                           addr);
    bar2_path(dir, res, sizeof(res));
    int f = open(res, (rdonly ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_SYNC);
    if (f < 0)
        return ivshm__fail_errno(errno, "cannot open ivshmem BAR2", res);
    struct stat st;
    if (fstat(f, &st) < 0) {
        int e = errno;
        close(f);
        return ivshm__fail_errno(e, "cannot stat", res);
    }
    *fd = f;
    *size = (uint64_t)st.st_size;
    *resolved = strdup(res);
    return IVSHM_OK;
}

/* The guest driver's devices (sysfs class "ivshmem"): how many, and the
 * first one's name; dir gets the class directory, for messages. */
static int driver_devices(char *dir, size_t dn, char *name, size_t n)
{
    snprintf(dir, dn, "%s/class/ivshmem", sysfs_root());
    return first_entry(dir, name, n);
}

/* dev: the guest driver's character device (guest-driver/ivshmem.c) */
static ivshm_status_t dev_open(const char *rest, bool rdonly, bool create,
                               uint64_t create_size, int *fd, uint64_t *size,
                               char **resolved)
{
    (void)create_size;
    if (create)
        return ivshm__fail(IVSHM_ERR_NOTSUP,
                           "a device region cannot be created; format it in "
                           "place or format the backing file on the host");
    char path[300];
    if (strcmp(rest, "auto") == 0 || *rest == '\0') {
        char dir[300], name[32];
        int n = driver_devices(dir, sizeof(dir), name, sizeof(name));
        if (n == 0)
            return ivshm__fail(IVSHM_ERR_NODEV,
                               "no device of the ivshmem guest driver (%s is "
                               "empty or missing): load ivshmem.ko (see "
                               "guest-driver/) or use pci:auto",
                               dir);
        if (n > 1)
            return ivshm__fail(IVSHM_ERR_AMBIGUOUS,
                               "%d ivshmem driver devices; choose one with "
                               "dev:N or dev:/dev/ivshmemN (see 'ivshm list')",
                               n);
        snprintf(path, sizeof(path), "/dev/%s", name);
    } else if (rest[0] == '/') {
        snprintf(path, sizeof(path), "%s", rest);
    } else {
        snprintf(path, sizeof(path), "/dev/ivshmem%s", rest);
    }
    int f = open(path, (rdonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (f < 0)
        return ivshm__fail_errno(errno, "cannot open ivshmem device", path);
    struct ivshmem_info info;
    ivshm_status_t st = ivshm__dev_info(f, path, &info);
    if (st == IVSHM_OK && (info.flags & IVSHMEM_F_BAR2_WC))
        st = ivshm__fail(IVSHM_ERR_NOTSUP,
                         "%s maps BAR2 write-combined (module parameter "
                         "bar2_map=wc): stores may pass each other there, "
                         "which the channels cannot allow; reload ivshmem.ko "
                         "with bar2_map=wb",
                         path);
    if (st != IVSHM_OK) {
        close(f);
        return st;
    }
    *fd = f;
    *size = info.shm_size;
    *resolved = strdup(path);
    return IVSHM_OK;
}

ivshm_status_t ivshm__dev_info(int fd, const char *path,
                               struct ivshmem_info *info)
{
    if (ioctl(fd, IVSHMEM_IOC_INFO, info) == 0)
        return IVSHM_OK;
    if (errno == ENOTTY || errno == EINVAL)
        return ivshm__fail(IVSHM_ERR_NODEV,
                           "%s is not a device of the ivshmem guest driver",
                           path);
    return ivshm__fail_errno(errno, "cannot query ivshmem device", path);
}

static const struct ivshm_provider providers[] = {
    {"file", file_open},
    {"pci", pci_open},
    {"dev", dev_open},
};

const char *ivshm__provider_memtype(const struct ivshm_provider *p, int fd)
{
    if (p && p->open == pci_open)
        return "uncached (sysfs resource2; write-back where the hypervisor "
               "ignores guest memory types)";
    if (p && p->open == dev_open) {
        struct ivshmem_info info;
        if (ioctl(fd, IVSHMEM_IOC_INFO, &info) != 0)
            return "unknown (guest driver did not answer)";
        return info.flags & IVSHMEM_F_BAR2_WB ? "write-back (guest driver)"
                                              : "uncached (guest driver, "
                                                "bar2_map=uc)";
    }
    return "write-back (shared memory file)";
}

bool ivshm__provider_is_dev(const struct ivshm_provider *p)
{
    return p && p->open == dev_open;
}

ivshm_status_t ivshm__provider_open(const char *uri, bool rdonly, bool create,
                                    uint64_t create_size,
                                    const struct ivshm_provider **prov,
                                    int *fd, uint64_t *size, char **resolved)
{
    if (strcmp(uri, "auto") == 0) {
        char dir[300], name[32];
        uri = driver_devices(dir, sizeof(dir), name, sizeof(name)) > 0
                  ? "dev:auto"
                  : "pci:auto";
    }
    const char *colon = strchr(uri, ':');
    if (!colon) {
        /* a bare absolute path is accepted as file: */
        if (uri[0] == '/')
            return file_open(uri, rdonly, create, create_size, fd, size,
                             resolved);
        return ivshm__fail(IVSHM_ERR_INVAL,
                           "region URI '%s' has no scheme; use file:PATH, "
                           "auto, pci:auto, pci:ADDRESS or dev:auto",
                           uri);
    }
    size_t n = (size_t)(colon - uri);
    for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++) {
        if (strlen(providers[i].scheme) == n &&
            strncmp(providers[i].scheme, uri, n) == 0) {
            *prov = &providers[i];
            return providers[i].open(colon + 1, rdonly, create, create_size,
                                     fd, size, resolved);
        }
    }
    return ivshm__fail(IVSHM_ERR_INVAL,
                       "unknown region scheme in '%s'; use file:PATH, "
                       "auto, pci:auto, pci:ADDRESS or dev:auto",
                       uri);
}
