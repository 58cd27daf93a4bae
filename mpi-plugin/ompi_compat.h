/*
 * What differs between the Open MPI releases the components build against:
 * 4.1.x (BTL 3.1) and 5.x (BTL 3.3, PMIx used directly). Checked by
 * compiling against Debian's 5.0.7 headers (scripts/check-ompi5.sh).
 */
#ifndef MCA_IVSHMEM_OMPI_COMPAT_H
#define MCA_IVSHMEM_OMPI_COMPAT_H

#include "opal_config.h"

#include "opal/mca/btl/btl.h"

#if BTL_VERSION >= 330
#include "opal/mca/pmix/pmix-internal.h"
#define IVSHMEM_PMIX_JOB_SIZE PMIX_JOB_SIZE
#define IVSHMEM_PMIX_GLOBAL PMIX_GLOBAL
#define IVSHMEM_PMIX_UINT32 PMIX_UINT32
#else
#include "opal/mca/pmix/pmix.h"
#define IVSHMEM_PMIX_JOB_SIZE OPAL_PMIX_JOB_SIZE
#define IVSHMEM_PMIX_GLOBAL OPAL_PMIX_GLOBAL
#define IVSHMEM_PMIX_UINT32 OPAL_UINT32
#endif

/* 5.x dropped the macro; the components are built with default
 * visibility, the attribute only makes the export explicit */
#ifndef OPAL_MODULE_DECLSPEC
#define OPAL_MODULE_DECLSPEC __attribute__((visibility("default")))
#endif

#endif
