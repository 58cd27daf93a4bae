/*
 * The `ivshmem` memory domain's memory: allocation from the region (so that
 * `ucp_mem_map` with UCP_MEM_MAP_ALLOCATE, OpenSHMEM's symmetric heap and
 * Open MPI's `MPI_Win_allocate` through osc ucx land where a peer in
 * another VM reaches them), registration, and the remote keys.
 *
 * Only memory of the region that a lease of this process owns is offered
 * to peers: this transport's own (its allocations, buffers placed through
 * its mapping), and memory of the BTL ivshmem's mapping that the BTL's
 * lease owns (the region heap's blocks, MPI_Alloc_mem buffers), which the
 * BTL's lookup names (ivshm/locate.h); the remote key then carries the
 * BTL's lease, which a peer's checks hold to as to any owner. Private
 * memory cannot be reached from another VM, so it is
 * registered for the local side of a put or get only, and its remote key
 * says so (a peer's unpack answers UCS_ERR_UNREACHABLE and UCP takes
 * another lane or its own protocol). A remote key is untrusted where it is
 * unpacked: its region must be one this process maps and its range must
 * lie in it; the owner's hold on the range is asked at every access
 * (uct_ivshmem_rma.c).
 */
#include "uct_ivshmem.h"

#include <ivshm/locate.h>

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The memory domains open in this process: a remote key names its region
 * by UUID, and UCX 1.13 unpacks it with no memory domain at hand. */
#define UCT_IVSHMEM_MAX_MDS 8
static pthread_mutex_t uct_ivshmem_mds_lock = PTHREAD_MUTEX_INITIALIZER;
static uct_ivshmem_md_t *uct_ivshmem_mds[UCT_IVSHMEM_MAX_MDS];

void uct_ivshmem_md_track(uct_ivshmem_md_t *md, int open)
{
    int i;
    pthread_mutex_lock(&uct_ivshmem_mds_lock);
    for (i = 0; i < UCT_IVSHMEM_MAX_MDS; i++) {
        if (open && uct_ivshmem_mds[i] == NULL) {
            uct_ivshmem_mds[i] = md;
            break;
        }
        if (!open && uct_ivshmem_mds[i] == md) {
            uct_ivshmem_mds[i] = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&uct_ivshmem_mds_lock);
    if (open && i == UCT_IVSHMEM_MAX_MDS)
        ucs_warn("ivshmem: more than %d memory domains open in this process: "
                 "peers' remote keys of region %s unpack as unreachable (UCP "
                 "moves those transfers by active messages)",
                 UCT_IVSHMEM_MAX_MDS, md->device);
}

/* The size of the region of that UUID this process maps, 0 if none. */
static uint64_t uct_ivshmem_mapped_region_size(const uint8_t uuid[16])
{
    uint64_t size = 0;
    pthread_mutex_lock(&uct_ivshmem_mds_lock);
    for (int i = 0; i < UCT_IVSHMEM_MAX_MDS && size == 0; i++)
        if (uct_ivshmem_mds[i] && memcmp(uct_ivshmem_mds[i]->uuid, uuid, 16) == 0)
            size = ivshm_region_size(uct_ivshmem_mds[i]->r);
    pthread_mutex_unlock(&uct_ivshmem_mds_lock);
    return size;
}

void uct_ivshmem_mem_caps(const uct_ivshmem_md_t *md,
                          uct_ivshmem_md_caps_t *caps)
{
    if (md->r == NULL)
        return;
    /* FIXED: OpenSHMEM places its symmetric heap at one address in every
     * PE (sshmem ucx maps with UCP_MEM_MAP_FIXED) */
    caps->flags = UCT_MD_FLAG_ALLOC | UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY |
                  UCT_MD_FLAG_FIXED;
    caps->reg_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    caps->alloc_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    caps->max_alloc = ivshm_region_size(md->r);
    caps->max_reg = ULONG_MAX;
    caps->rkey_packed_size = sizeof(uct_ivshmem_rkey_packed_t);
    /* a registration is a few comparisons and a look at the chunk table */
    caps->reg_cost = ucs_linear_func_make(50e-9, 0);
}

/* Private memory where the region has no room: UCX 1.13 takes a failed
 * allocation of a memory domain as the end of ucp_mem_map (no fallback to
 * its next method), so the domain falls back itself, as the region heap
 * does; peers reach such memory by UCP's software path. */
static ucs_status_t uct_ivshmem_mem_alloc_private(uct_ivshmem_md_t *md,
                                                  size_t len, void **address_p,
                                                  unsigned flags,
                                                  const char *alloc_name,
                                                  uct_ivshmem_memh_t *mh)
{
    int fixed = (flags & UCT_MD_MEM_FLAG_FIXED) != 0;
    void *p = mmap(fixed ? *address_p : NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS |
                   (fixed ? MAP_FIXED_NOREPLACE : 0), -1, 0);
    if (p == MAP_FAILED || (fixed && p != *address_p)) {
        if (p != MAP_FAILED)
            munmap(p, len);
        return UCS_ERR_NO_MEMORY;
    }
    ucs_diag("ivshmem: region %s has no room for %zu bytes (%s): private "
             "memory, which peers in other VMs reach by UCP's software path",
             md->device, len, alloc_name);
    mh->addr = p;
    mh->len = len;
    mh->allocated = 1;
    mh->private_map = 1;
    *address_p = p;
    return UCS_OK;
}

ucs_status_t uct_ivshmem_mem_alloc(uct_md_h tl_md, size_t *length_p,
                                   void **address_p, ucs_memory_type_t mem_type,
                                   unsigned flags, const char *alloc_name,
                                   uct_mem_h *memh_p)
{
    uct_ivshmem_md_t *md = ucs_derived_of(tl_md, uct_ivshmem_md_t);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (md->r == NULL || mem_type != UCS_MEMORY_TYPE_HOST)
        return UCS_ERR_UNSUPPORTED;
    size_t len = ucs_align_up(ucs_max(*length_p, 1), page);
    uint64_t off;
    uct_ivshmem_memh_t *mh = ucs_calloc(1, sizeof(*mh), "ivshmem memh");
    if (mh == NULL)
        return UCS_ERR_NO_MEMORY;
    if (ivshm_alloc(md->r, len, &off) != IVSHM_OK) {
        ucs_status_t status = uct_ivshmem_mem_alloc_private(
                md, len, address_p, flags, alloc_name, mh);
        if (status != UCS_OK) {
            ucs_free(mh);
            return status;
        }
        *length_p = len;
        *memh_p = mh;
        return UCS_OK;
    }
    void *addr = (char *)ivshm_region_base(md->r) + off;
    if (flags & UCT_MD_MEM_FLAG_FIXED) {
        /* the same chunks, seen a second time at the address asked for */
        if (ivshm_region_map_alias(md->r, off, len, *address_p) != IVSHM_OK) {
            ucs_debug("ivshmem: cannot place %zu bytes of region %s at %p: "
                      "%s", len, md->device, *address_p, ivshm_last_error());
            ivshm_free(md->r, off);
            ucs_free(mh);
            return UCS_ERR_NO_MEMORY;
        }
        addr = *address_p;
        mh->alias = 1;
    }
    mh->addr = addr;
    mh->len = len;
    mh->off = off;
    mh->remote = ivshm_self_identity(md->r, &mh->owner) == IVSHM_OK;
    mh->allocated = 1;
    ucs_debug("ivshmem: allocated %zu bytes at %p (region %s offset %llu) "
              "for %s", len, addr, md->device, (unsigned long long)off,
              alloc_name);
    *length_p = len;
    *address_p = addr;
    *memh_p = mh;
    return UCS_OK;
}

ucs_status_t uct_ivshmem_mem_free(uct_md_h tl_md, uct_mem_h memh)
{
    uct_ivshmem_md_t *md = ucs_derived_of(tl_md, uct_ivshmem_md_t);
    uct_ivshmem_memh_t *mh = memh;
    if (!mh->allocated)
        return UCS_ERR_INVALID_PARAM;
    if (mh->alias || mh->private_map)
        munmap(mh->addr, mh->len);
    if (!mh->private_map)
        ivshm_free(md->r, mh->off);
    ucs_free(mh);
    return UCS_OK;
}

/* the owner's lease of a range: a located heap block's, or a peer's key's */
static void uct_ivshmem_owner_set(ivshm_identity_t *owner,
                                  const uint8_t region_uuid[16], uint64_t vm_id,
                                  uint32_t slot, uint32_t gen, uint32_t pid)
{
    memset(owner, 0, sizeof(*owner));
    memcpy(owner->region_uuid, region_uuid, 16);
    owner->vm_id = vm_id;
    owner->slot = slot;
    owner->gen = gen;
    owner->pid = pid;
}

/* Memory of another mapping of this region in this process: the lookup
 * of the copy of libivshm that owns it (ivshm/locate.h; the BTL ivshmem),
 * asked at each registration and never kept, since that copy may be
 * unloaded. True when the whole range is that copy's memory of this
 * domain's region. */
static int uct_ivshmem_mem_locate(const uct_ivshmem_md_t *md, void *address,
                                  size_t length, uct_ivshmem_memh_t *mh)
{
    ivshm_locate_fn locate = (ivshm_locate_fn)dlsym(RTLD_DEFAULT,
                                                    IVSHM_LOCATE_SYMBOL);
    ivshm_location_t loc;
    if (locate == NULL || locate(address, length, &loc) != 0 ||
        memcmp(loc.region_uuid, md->uuid, 16) != 0)
        return 0;
    uct_ivshmem_owner_set(&mh->owner, loc.region_uuid, loc.vm_id, loc.slot,
                          loc.gen, loc.pid);
    mh->off = loc.off;
    return 1;
}

/* Remote when the whole range is region memory a lease of this process
 * owns: this transport's (its allocations, buffers a library placed
 * through its mapping), else the BTL's (the region heap's blocks,
 * MPI_Alloc_mem buffers: uct_ivshmem_mem_locate). Anything else is for
 * local use only.
 *
 * A registration describes the memory when it is made, and UCP's
 * registration cache may keep it after the block is freed (the heap gives
 * the chunks back without unmapping them, so no memory event tells UCP).
 * It stays true while the address maps the same chunks: the mapping lives
 * as long as its owner's region, and the heap hands that address out
 * again only with the same chunks under the same lease. Where a chunk has
 * gone to another lease, the key's owner no longer holds it and a peer's
 * access is refused (docs/ucx.md, "Remote memory access"). */
ucs_status_t uct_ivshmem_mem_register(uct_md_h tl_md, void *address,
                                      size_t length, uct_mem_h *memh_p)
{
    uct_ivshmem_md_t *md = ucs_derived_of(tl_md, uct_ivshmem_md_t);
    uct_ivshmem_memh_t *mh = ucs_calloc(1, sizeof(*mh), "ivshmem memh");
    if (mh == NULL)
        return UCS_ERR_NO_MEMORY;
    mh->addr = address;
    mh->len = length;
    if (md->r != NULL && length > 0) {
        if (ivshm_region_offset_of(md->r, address, length) != UINT64_MAX)
            mh->remote = ivshm_region_locate(md->r, address, length, &mh->off,
                                             &mh->owner) == IVSHM_OK;
        else
            mh->remote = uct_ivshmem_mem_locate(md, address, length, mh);
    }
    *memh_p = mh;
    return UCS_OK;
}

ucs_status_t uct_ivshmem_mem_dereg(uct_md_h tl_md,
                                   const uct_md_mem_dereg_params_t *params)
{
    (void)tl_md;
    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
    uct_ivshmem_memh_t *mh = params->memh;
    if (mh->allocated)
        return UCS_ERR_INVALID_PARAM; /* freed with mem_free */
    ucs_free(mh);
    return UCS_OK;
}

ucs_status_t uct_ivshmem_mkey_pack_memh(uct_md_h tl_md, uct_mem_h memh,
                                        void *rkey_buffer)
{
    uct_ivshmem_md_t *md = ucs_derived_of(tl_md, uct_ivshmem_md_t);
    const uct_ivshmem_memh_t *mh = memh;
    uct_ivshmem_rkey_packed_t p;
    memset(&p, 0, sizeof(p));
    p.magic = UCT_IVSHMEM_RKEY_MAGIC;
    if (mh->remote && md->r) {
        /* the owner: this transport's lease, or the BTL's */
        p.flags = UCT_IVSHMEM_RKEY_REMOTE;
        memcpy(p.region_uuid, md->uuid, 16);
        p.addr = (uint64_t)(uintptr_t)mh->addr;
        p.off = mh->off;
        p.len = mh->len;
        p.vm_id = mh->owner.vm_id;
        p.slot = mh->owner.slot;
        p.gen = mh->owner.gen;
        p.pid = mh->owner.pid;
    }
    p.version = UCT_IVSHMEM_WIRE_VERSION;
    memcpy(rkey_buffer, &p, sizeof(p));
    return UCS_OK;
}

/* The key came from a peer: read once, every field checked. A key of
 * private memory, or of a region this process does not map (a peer on
 * another host), is unreachable; one that is malformed or reaches past
 * its region is an error. */
ucs_status_t uct_ivshmem_rkey_unpack(uct_component_t *component,
                                     const void *rkey_buffer,
                                     uct_rkey_t *rkey_p, void **handle_p)
{
    uct_ivshmem_rkey_packed_t p;
    (void)component;
    memcpy(&p, rkey_buffer, sizeof(p));
    if (p.magic != UCT_IVSHMEM_RKEY_MAGIC ||
        (p.flags & ~UCT_IVSHMEM_RKEY_REMOTE) != 0) {
        ucs_error("ivshmem: a peer's remote key is malformed (magic 0x%x, "
                  "flags 0x%x)", p.magic, p.flags);
        return UCS_ERR_INVALID_PARAM;
    }
    if (p.version != UCT_IVSHMEM_WIRE_VERSION) {
        ucs_error("ivshmem: a peer's remote key is of wire version %u, this "
                  "transport's %u (another libuct_ivshmem build)", p.version,
                  UCT_IVSHMEM_WIRE_VERSION);
        return UCS_ERR_UNREACHABLE;
    }
    if (!(p.flags & UCT_IVSHMEM_RKEY_REMOTE))
        return UCS_ERR_UNREACHABLE; /* private memory of the peer */
    uint64_t rsize = uct_ivshmem_mapped_region_size(p.region_uuid);
    if (rsize == 0)
        return UCS_ERR_UNREACHABLE; /* a region this process does not map */
    if (p.len == 0 || p.len > rsize || p.off > rsize - p.len ||
        p.addr > UINT64_MAX - p.len) {
        ucs_error("ivshmem: a peer's remote key (pid %u) names %llu bytes at "
                  "offset %llu of a region of %llu bytes: refused", p.pid,
                  (unsigned long long)p.len, (unsigned long long)p.off,
                  (unsigned long long)rsize);
        return UCS_ERR_INVALID_PARAM;
    }
    uct_ivshmem_rkey_t *k = ucs_calloc(1, sizeof(*k), "ivshmem rkey");
    if (k == NULL)
        return UCS_ERR_NO_MEMORY;
    uct_ivshmem_owner_set(&k->owner, p.region_uuid, p.vm_id, p.slot, p.gen,
                          p.pid);
    k->addr = p.addr;
    k->off = p.off;
    k->len = p.len;
    *rkey_p = (uct_rkey_t)(uintptr_t)k;
    *handle_p = NULL;
    return UCS_OK;
}

ucs_status_t uct_ivshmem_rkey_release(uct_component_t *component,
                                      uct_rkey_t rkey, void *handle)
{
    (void)component;
    (void)handle;
    ucs_free((void *)(uintptr_t)rkey);
    return UCS_OK;
}
