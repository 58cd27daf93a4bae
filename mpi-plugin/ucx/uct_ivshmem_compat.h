/*
 * What differs between the UCX releases the transport is built against:
 * UCX 1.13 (Debian 12) and UCX 1.18 (Debian 13). Every version
 * conditional of mpi-plugin/ucx is here; the other files implement one
 * version-neutral function per operation and take UCX's signatures from
 * the adapters below. UCX checks no ABI when a component registers, so
 * the sources must be those of the installed UCX (configure checks the
 * version) and the library registers only into that version at run time
 * (uct_ivshmem_md.c).
 *
 * Between 1.13 and 1.18 (read in both source trees):
 *  - md query fills uct_md_attr_v2_t (flat fields, more of them, defaults
 *    from uct_md_base_md_query), not uct_md_attr_t's `cap`;
 *  - mem_reg takes a params struct in place of the flags;
 *  - mkey_pack also gets the range to pack;
 *  - md ops lost is_sockaddr_accessible and gained mem_attach;
 *  - the component gained rkey_compare;
 *  - ucs_align_up moved to ucs/sys/ptr_arith.h;
 *  - reachability moved to the internal ops (iface_is_reachable_v2 with a
 *    params struct; the public op is UCX's base adapter to it), which also
 *    gained ep_is_connected and ep_connect_to_ep_v2;
 *  - an interface reaching other nodes says UCT_IFACE_FLAG_INTER_NODE;
 *  - UCP's rendezvous needs the domain in its registration cache.
 * Other versions are refused at compile time: only these two were built
 * and run (docs/support.md).
 *
 * Included ahead of every other header of every unit of mpi-plugin/ucx
 * (and by configure's test compile): its first part is the build
 * configuration of the installed UCX, as UCX's own config.h would give it
 * (`ucx_info -b`). UCX's internal headers change their structures and
 * inline code with these macros, so they must say what the installed
 * libuct/libucs were built with.
 */
#ifndef UCT_IVSHMEM_COMPAT_H
#define UCT_IVSHMEM_COMPAT_H

#include <string.h>

#include <uct/api/version.h> /* installed (public): the version in use */

#if UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 13
#define UCT_IVSHMEM_UCX_118 0
#elif UCT_VERNO_MAJOR == 1 && UCT_VERNO_MINOR == 18
#define UCT_IVSHMEM_UCX_118 1
#else
#error "the ivshmem UCT transport builds against UCX 1.13 or 1.18 only (uct_ivshmem_compat.h)"
#endif

/* ---- Debian's build of that UCX ---- */

/* both: --enable-mt, assertions and parameter checks at their defaults,
 * no statistics (ENABLE_STATS stays undefined), no debug data, no
 * valgrind hooks, x86's builtin memcpy */
#define ENABLE_MT 1
#define ENABLE_ASSERT 1
#define ENABLE_PARAMS_CHECK 1
#define ENABLE_DEBUG_DATA 0
#define NVALGRIND 1
#define ENABLE_BUILTIN_MEMCPY 1
#if UCT_IVSHMEM_UCX_118
/* Debian 13 (ucx 1.18.1+ds-2): --enable-logging --enable-profiling */
#define UCS_MAX_LOG_LEVEL UCS_LOG_LEVEL_TRACE_POLL
#define HAVE_PROFILING 1
#else
/* Debian 12 (ucx 1.13.1-1): --disable-logging keeps messages up to debug
 * level (src/ucs/configure.m4) */
#define UCS_MAX_LOG_LEVEL UCS_LOG_LEVEL_DEBUG
#endif

#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#if UCT_IVSHMEM_UCX_118
#include <ucs/sys/ptr_arith.h> /* ucs_align_up, 1.13's in ucs/sys/math.h */
/* What 1.13's libraries lack, weak: a 1.18 build preloaded into a 1.13
 * process then loads (an undefined address in an ops table is a fatal
 * "symbol lookup error" at load) and its version check refuses it with
 * one line (uct_ivshmem_md.c); nothing calls these before that check. */
#pragma weak uct_base_iface_is_reachable
#pragma weak uct_base_rkey_compare
#pragma weak uct_md_base_md_query
#pragma weak uct_iface_is_reachable_params_addrs_valid
#pragma weak ucs_config_doc_nop
#endif

/* The version-neutral operations the adapters call (the transport's
 * files define them). */
/* md_query's memory part: what the domain registers and allocates */
typedef struct uct_ivshmem_md_caps {
    uint64_t flags;
    uint64_t reg_mem_types, alloc_mem_types, access_mem_types;
    size_t max_alloc, max_reg;
    size_t rkey_packed_size;
    ucs_linear_func_t reg_cost;
} uct_ivshmem_md_caps_t;
void uct_ivshmem_md_caps(uct_md_h tl_md, uct_ivshmem_md_caps_t *caps);
ucs_status_t uct_ivshmem_mem_register(uct_md_h tl_md, void *address,
                                      size_t length, uct_mem_h *memh_p);
ucs_status_t uct_ivshmem_mkey_pack_memh(uct_md_h tl_md, uct_mem_h memh,
                                        void *rkey_buffer);
int uct_ivshmem_iface_reaches(uct_iface_h tl_iface,
                              const uct_device_addr_t *dev_addr,
                              const uct_iface_addr_t *iface_addr);
int uct_ivshmem_ep_connected_to(uct_ep_h tl_ep,
                                const uct_device_addr_t *dev_addr,
                                const uct_iface_addr_t *iface_addr);

/* ---- the memory domain ---- */

#if UCT_IVSHMEM_UCX_118
typedef uct_md_attr_v2_t uct_ivshmem_md_attr_t;
#else
typedef uct_md_attr_t uct_ivshmem_md_attr_t;
#endif

static inline ucs_status_t uct_ivshmem_md_query_compat(uct_md_h tl_md,
                                                       uct_ivshmem_md_attr_t *attr)
{
    uct_ivshmem_md_caps_t c;
    memset(&c, 0, sizeof(c));
    c.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    uct_ivshmem_md_caps(tl_md, &c);
#if UCT_IVSHMEM_UCX_118
    uct_md_base_md_query(attr); /* defaults of the fields 1.13 lacks */
    attr->flags = c.flags;
    attr->reg_mem_types = c.reg_mem_types;
    attr->alloc_mem_types = c.alloc_mem_types;
    attr->access_mem_types = c.access_mem_types;
    attr->max_alloc = c.max_alloc;
    attr->max_reg = c.max_reg;
    /* UCP 1.18's protocols take a registering domain to be in its
     * registration cache (datatype_iter.inl asserts it in a rendezvous
     * send: "cache_md_map ... md_map"), as 1.13's cache kept them anyway
     * (docs/ucx.md, "A registered block that is freed") */
    attr->cache_mem_types = c.reg_mem_types;
#else
    attr->cap.flags = c.flags;
    attr->cap.reg_mem_types = c.reg_mem_types;
    attr->cap.alloc_mem_types = c.alloc_mem_types;
    attr->cap.detect_mem_types = 0;
    attr->cap.access_mem_types = c.access_mem_types;
    attr->cap.max_alloc = c.max_alloc;
    attr->cap.max_reg = c.max_reg;
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
#endif
    attr->rkey_packed_size = c.rkey_packed_size;
    attr->reg_cost = c.reg_cost;
    return UCS_OK;
}

#if UCT_IVSHMEM_UCX_118
static inline ucs_status_t
uct_ivshmem_mem_reg_compat(uct_md_h tl_md, void *address, size_t length,
                           const uct_md_mem_reg_params_t *params,
                           uct_mem_h *memh_p)
{
    (void)params; /* flags: none changes what is registered */
    return uct_ivshmem_mem_register(tl_md, address, length, memh_p);
}

static inline ucs_status_t
uct_ivshmem_mkey_pack_compat(uct_md_h tl_md, uct_mem_h memh, void *address,
                             size_t length,
                             const uct_md_mkey_pack_params_t *params,
                             void *rkey_buffer)
{
    (void)address; /* the key describes the whole registration */
    (void)length;
    (void)params;
    return uct_ivshmem_mkey_pack_memh(tl_md, memh, rkey_buffer);
}

/* md ops the two versions name differently */
#define UCT_IVSHMEM_MD_OPS_COMPAT                                              \
    .mem_attach = (uct_md_mem_attach_func_t)ucs_empty_function_return_unsupported,
/* component fields 1.13 lacks: keys compare by handle, as tcp's and ib's */
#define UCT_IVSHMEM_COMPONENT_COMPAT .rkey_compare = uct_base_rkey_compare,
#else
static inline ucs_status_t uct_ivshmem_mem_reg_compat(uct_md_h tl_md,
                                                      void *address,
                                                      size_t length,
                                                      unsigned flags,
                                                      uct_mem_h *memh_p)
{
    (void)flags;
    return uct_ivshmem_mem_register(tl_md, address, length, memh_p);
}

static inline ucs_status_t
uct_ivshmem_mkey_pack_compat(uct_md_h tl_md, uct_mem_h memh,
                             const uct_md_mkey_pack_params_t *params,
                             void *rkey_buffer)
{
    (void)params;
    return uct_ivshmem_mkey_pack_memh(tl_md, memh, rkey_buffer);
}

#define UCT_IVSHMEM_MD_OPS_COMPAT                                              \
    .is_sockaddr_accessible =                                                  \
        (uct_md_is_sockaddr_accessible_func_t)ucs_empty_function_return_zero,
#define UCT_IVSHMEM_COMPONENT_COMPAT
#endif

/* ---- the interface: reachability ---- */

/* what UCX's base interface has in both (1.13's uct_base_iface_internal_ops) */
#define UCT_IVSHMEM_IFACE_INTERNAL_OPS_BASE                                    \
    .iface_estimate_perf = uct_base_iface_estimate_perf,                       \
    .iface_vfs_refresh = (uct_iface_vfs_refresh_func_t)ucs_empty_function,     \
    .ep_query = (uct_ep_query_func_t)ucs_empty_function_return_unsupported,    \
    .ep_invalidate =                                                           \
        (uct_ep_invalidate_func_t)ucs_empty_function_return_unsupported

#if UCT_IVSHMEM_UCX_118
/* Any scope: the one device is the region, and a peer is reached only in
 * it (network scope asks no more of a network device). */
static inline int
uct_ivshmem_iface_is_reachable_v2(const uct_iface_h tl_iface,
                                  const uct_iface_is_reachable_params_t *params)
{
    if (!uct_iface_is_reachable_params_addrs_valid(params))
        return 0;
    return uct_ivshmem_iface_reaches(tl_iface, params->device_addr,
                                     params->iface_addr);
}

static inline int
uct_ivshmem_ep_is_connected(const uct_ep_h tl_ep,
                            const uct_ep_is_connected_params_t *params)
{
    if (!(params->field_mask & UCT_EP_IS_CONNECTED_FIELD_DEVICE_ADDR) ||
        !(params->field_mask & UCT_EP_IS_CONNECTED_FIELD_IFACE_ADDR))
        return 0;
    return uct_ivshmem_ep_connected_to(tl_ep, params->device_addr,
                                       params->iface_addr);
}

/* the interface's internal ops (UCX's base ones, as in 1.13, and ours) */
#define UCT_IVSHMEM_IFACE_INTERNAL_OPS_INIT                                    \
    {                                                                          \
        UCT_IVSHMEM_IFACE_INTERNAL_OPS_BASE,                                   \
        .ep_connect_to_ep_v2 = (uct_ep_connect_to_ep_v2_func_t)                \
            ucs_empty_function_return_unsupported,                             \
        .iface_is_reachable_v2 = uct_ivshmem_iface_is_reachable_v2,            \
        .ep_is_connected = uct_ivshmem_ep_is_connected,                        \
    }
#define UCT_IVSHMEM_IFACE_IS_REACHABLE uct_base_iface_is_reachable
/* The peers are other nodes (VMs): 1.18's address for peers on other
 * nodes (UCP_WORKER_ADDRESS_FLAG_NET_ONLY, Open MPI's pml ucx) keeps only
 * interfaces with this flag, where 1.13 went by the device type (NET) */
#define UCT_IVSHMEM_IFACE_CAP_FLAGS UCT_IFACE_FLAG_INTER_NODE
#else
static inline int uct_ivshmem_iface_is_reachable(const uct_iface_h tl_iface,
                                                 const uct_device_addr_t *dev_addr,
                                                 const uct_iface_addr_t *iface_addr)
{
    return uct_ivshmem_iface_reaches(tl_iface, dev_addr, iface_addr);
}
#define UCT_IVSHMEM_IFACE_INTERNAL_OPS_INIT {UCT_IVSHMEM_IFACE_INTERNAL_OPS_BASE}
#define UCT_IVSHMEM_IFACE_IS_REACHABLE uct_ivshmem_iface_is_reachable
#define UCT_IVSHMEM_IFACE_CAP_FLAGS 0
#endif

#endif
