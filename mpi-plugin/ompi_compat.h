/*
 * What differs between the Open MPI releases the components build against:
 * 4.1.x (BTL 3.1, coll 2.0) and 5.x (BTL 3.3, coll 2.4, PMIx used
 * directly). Everything that differs lives here, behind one switch
 * (IVSHMEM_OMPI5); the components' sources have no version test of their
 * own. Built and run against Debian 13's 5.0.7 in a trixie root
 * (scripts/debian13-root.sh, docs/support.md).
 */
#ifndef MCA_IVSHMEM_OMPI_COMPAT_H
#define MCA_IVSHMEM_OMPI_COMPAT_H

#include "opal_config.h"

#include "opal/mca/btl/btl.h"

#include <stdlib.h>
#include <string.h>

/* Open MPI 5.x: BTL 3.3 comes with coll 2.4, mpool 3.1 and PRRTE */
#define IVSHMEM_OMPI5 (BTL_VERSION >= 330)

#if IVSHMEM_OMPI5
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

/* Reads a component's modex entry that a peer may not have posted (its
 * component not loaded, its region missing): 0 and the entry (free it),
 * or an error. 4.1's PMIx answers "not found" once the fence has
 * collected every entry. Under 5.x's PRRTE the fence leaves another
 * node's entries with that node's PMIx server: a plain PMIx_Get fetches
 * them but waits for a key that was never posted until someone posts it
 * (the job hangs in MPI_Init), and PMIX_IMMEDIATE looks only at what is
 * already here (a simulated VM is another node: its entry is never
 * found, though a process of this OS is). PMIX_GET_REFRESH_CACHE
 * fetches another node's entries and answers from them, the entry or
 * "not found" at once; for a process of this node it finds nothing. So:
 * what is here, else a refresh. */
static inline int ivshmem_modex_recv_if_posted(const mca_base_component_t *comp,
                                               const opal_process_name_t *name,
                                               void **data, size_t *size)
{
    int rc;
#if IVSHMEM_OMPI5
    char *key = mca_base_component_to_string(comp);
    pmix_proc_t proc;
    pmix_value_t *val = NULL;
    pmix_info_t how;
    *data = NULL;
    *size = 0;
    if (!key)
        return OPAL_ERR_OUT_OF_RESOURCE;
    OPAL_PMIX_CONVERT_NAME(&proc, name);
    PMIX_INFO_LOAD(&how, PMIX_IMMEDIATE, NULL, PMIX_BOOL);
    if (PMIx_Get(&proc, key, &how, 1, &val) != PMIX_SUCCESS) {
        if (val)
            PMIX_VALUE_RELEASE(val);
        val = NULL;
        PMIX_INFO_DESTRUCT(&how);
        PMIX_INFO_LOAD(&how, PMIX_GET_REFRESH_CACHE, NULL, PMIX_BOOL);
        if (PMIx_Get(&proc, key, &how, 1, &val) != PMIX_SUCCESS && val) {
            PMIX_VALUE_RELEASE(val);
            val = NULL;
        }
    }
    rc = val && val->type == PMIX_BYTE_OBJECT ? OPAL_SUCCESS
                                              : OPAL_ERR_NOT_FOUND;
    if (rc == OPAL_SUCCESS) {
        *data = val->data.bo.bytes;
        *size = val->data.bo.size;
        val->data.bo.bytes = NULL; /* now the caller's */
    }
    if (val)
        PMIX_VALUE_RELEASE(val);
    PMIX_INFO_DESTRUCT(&how);
    free(key);
#else
    OPAL_MODEX_RECV(rc, comp, name, data, size);
#endif
    return rc;
}

/* coll: the component's version (5.x's communicators name themselves
 * through a pointer, 4.1's through an array: both print with %s) */
#if IVSHMEM_OMPI5
#define IVSHMEM_COLL_COMPONENT_T mca_coll_base_component_2_4_0_t
#define IVSHMEM_COLL_BASE_VERSION MCA_COLL_BASE_VERSION_2_4_0
#else
#define IVSHMEM_COLL_COMPONENT_T mca_coll_base_component_2_0_0_t
#define IVSHMEM_COLL_BASE_VERSION MCA_COLL_BASE_VERSION_2_0_0
#endif

/* Hands one received message (one segment) to the callback ob1
 * registered for its tag. BTL 3.3 passes a receive descriptor that names
 * the sender; 3.1 a full descriptor and the tag. 3.1's descriptor is 104
 * bytes: a caller whose deliveries never nest nor run in two threads at
 * once passes one it keeps (zero but for the two segment fields, which
 * are set here), since zeroing it for each message cost 18 of the
 * region route's 119 instructions a message besides ob1's match
 * (docs/channels.md, "The receive descriptor"); kept NULL builds one on
 * the stack. */
static inline void
ivshmem_compat_deliver(struct mca_btl_base_module_t *btl,
                       struct mca_btl_base_endpoint_t *ep,
                       mca_btl_base_tag_t tag, mca_btl_base_segment_t *seg,
                       const mca_btl_active_message_callback_t *reg,
                       mca_btl_base_descriptor_t *kept)
{
#if IVSHMEM_OMPI5
    (void)kept;
    mca_btl_base_receive_descriptor_t rd = {
        .endpoint = ep,
        .des_segments = seg,
        .des_segment_count = 1,
        .tag = tag,
        .cbdata = reg->cbdata,
    };
    reg->cbfunc(btl, &rd);
#else
    (void)ep;
    mca_btl_base_descriptor_t des;
    if (!kept) {
        memset(&des, 0, sizeof(des));
        kept = &des;
    }
    kept->des_segments = seg;
    kept->des_segment_count = 1;
    reg->cbfunc(btl, tag, kept, reg->cbdata);
#endif
}

/* 5.x dropped the macro; the components are built with default
 * visibility, the attribute only makes the export explicit */
#ifndef OPAL_MODULE_DECLSPEC
#define OPAL_MODULE_DECLSPEC __attribute__((visibility("default")))
#endif

#endif
