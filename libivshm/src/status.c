/*
 * Status texts and the per-thread "last error" sentence that names the
 * path, the field or the fix behind a failure.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[512] = "no error";
static _Thread_local unsigned long fails; /* messages set in this thread */

unsigned long ivshm__fails(void) { return fails; }

const char *ivshm_strerror(ivshm_status_t st)
{
    switch (st) {
    case IVSHM_OK: return "success";
    case IVSHM_ERR_INVAL: return "invalid argument";
    case IVSHM_ERR_NOENT: return "region or device not found";
    case IVSHM_ERR_PERM: return "permission denied";
    case IVSHM_ERR_NODEV: return "no ivshmem device";
    case IVSHM_ERR_AMBIGUOUS: return "several ivshmem devices";
    case IVSHM_ERR_TOO_SMALL: return "region too small";
    case IVSHM_ERR_UNFORMATTED: return "region not formatted";
    case IVSHM_ERR_BAD_MAGIC: return "not an ivshm region (bad magic)";
    case IVSHM_ERR_VERSION: return "unsupported layout version";
    case IVSHM_ERR_CORRUPT: return "region corrupt";
    case IVSHM_ERR_SIZE_MISMATCH: return "region size mismatch";
    case IVSHM_ERR_REGISTRY_FULL: return "registry full";
    case IVSHM_ERR_NOSPACE: return "region full";
    case IVSHM_ERR_BUSY: return "region busy";
    case IVSHM_ERR_LEASE_LOST: return "lease lost";
    case IVSHM_ERR_EXISTS: return "already exists";
    case IVSHM_ERR_NOT_FOUND: return "not found";
    case IVSHM_ERR_PEER_DEAD: return "peer is gone";
    case IVSHM_ERR_AGAIN: return "resource temporarily unavailable";
    case IVSHM_ERR_TRUNCATED: return "message truncated";
    case IVSHM_ERR_NOTSUP: return "not supported";
    case IVSHM_ERR_SYS: return "system error";
    case IVSHM_ERR_QUOTA: return "region-heap quota spent";
    }
    return "unknown status";
}

const char *ivshm_last_error(void) { return last_error; }

ivshm_status_t ivshm__fail(ivshm_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    fails++;
    return st;
}

ivshm_status_t ivshm__fail_errno(int err, const char *what, const char *path)
{
    switch (err) {
    case ENOENT:
        return ivshm__fail(IVSHM_ERR_NOENT, "%s %s: %s", what, path,
                           strerror(err));
    case EACCES:
    case EPERM:
        return ivshm__fail(
            IVSHM_ERR_PERM,
            "%s %s: %s; give this user access: in a guest install the udev "
            "rule (guest-driver/60-ivshmem.rules, group 'ivshmem') or run "
            "'chmod 0660 %s' and 'chgrp ivshmem %s'; on a host check the "
            "file's owner and mode",
            what, path, strerror(err), path, path);
    default:
        return ivshm__fail(IVSHM_ERR_SYS, "%s %s: %s", what, path,
                           strerror(err));
    }
}
