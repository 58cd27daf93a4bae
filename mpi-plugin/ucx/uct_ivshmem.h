/*
 * UCT transport `ivshmem`: UCX's active messages between processes that map
 * the same libivshm region (processes in co-resident VMs), carried by the
 * library's channels (ivshm/channel.h). One component and memory domain
 * (uct_ivshmem_md.c: the region, its lease, the version check and the
 * registration), one interface per UCT worker (uct_ivshmem_iface.c: the
 * receive side, progress, addresses, reachability) and its endpoints
 * (uct_ivshmem_ep.c: the send side and the pending queue). Remote memory
 * access: uct_ivshmem_mem.c (allocation in the region, registration, the
 * remote keys and their checks) and uct_ivshmem_rma.c (put, get and
 * atomics, each checked against the owner's lease).
 *
 * Reachability is decided by the region, never by host name or boot id:
 * a peer is reached when it publishes a live lease in the same region
 * (UUID, registry slot and generation), as the BTL decides it.
 */
#ifndef UCT_IVSHMEM_H
#define UCT_IVSHMEM_H

/* first: the build configuration UCX's internal headers read */
#include "uct_ivshmem_compat.h"

#include <ucs/arch/cpu.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/queue.h>
#include <ucs/sys/math.h>

#include <ivshm/channel.h>
#include <ivshm/ivshm.h>

#define UCT_IVSHMEM_NAME "ivshmem"

/* Device address: the identity of the region (its UUID). */
typedef struct uct_ivshmem_dev_addr {
    uint8_t region_uuid[16];
} UCS_S_PACKED uct_ivshmem_dev_addr_t;

/* Interface address: the process' lease in that region (its identity
 * less the region's UUID, which the device address carries), the largest
 * message it sends (both sides must agree on it: a message is received
 * whole), and its channel endpoint's address less the leading region UUID.
 * UCX 1.13 packs an interface address of at most 63 bytes. The wire
 * version names the layouts of this address and of the remote key, and
 * what the messages carry: two transports of different versions do not
 * reach each other (one line says so). A build from before the version
 * (a 56-byte address) is read one byte past its end, inside UCP's packed
 * worker address: one in 256 such peers would pass this check. */
#define UCT_IVSHMEM_WIRE_VERSION 1
#define UCT_IVSHMEM_CHAN_TAIL (IVSHM_EP_ADDR_SIZE - 16)
typedef struct uct_ivshmem_iface_addr {
    uint64_t vm_id;
    uint32_t slot, gen, pid;
    uint32_t max_bcopy;
    uint8_t chan_tail[UCT_IVSHMEM_CHAN_TAIL];
    uint8_t version; /* UCT_IVSHMEM_WIRE_VERSION */
} UCS_S_PACKED uct_ivshmem_iface_addr_t;
_Static_assert(sizeof(uct_ivshmem_iface_addr_t) == 57,
               "interface address layout (UCX 1.13 packs at most 63 bytes)");

typedef struct uct_ivshmem_md_config {
    uct_md_config_t super;
    char *region;     /* region URI; empty: $IVSHM_REGION, else auto */
    char *domain;     /* channel domain (job area) every UCX process joins */
    unsigned max_eps; /* endpoints the domain holds (first member sizes it) */
} uct_ivshmem_md_config_t;

typedef struct uct_ivshmem_md {
    uct_md_t super;
    ivshm_region_t *r;     /* NULL: no region here (no device offered) */
    ivshm_domain_t *dom;
    uint8_t uuid[16];
    char device[UCT_DEVICE_NAME_MAX];
} uct_ivshmem_md_t;

typedef struct uct_ivshmem_iface_config {
    uct_iface_config_t super;
    int same_vm; /* also reach processes of this VM (UCX's own shared
                  * memory serves them better) */
    int stats;   /* print the counters when the interface closes */
    ucs_time_t peer_timeout; /* how long a peer in doubt may stay silent */
} uct_ivshmem_iface_config_t;

typedef struct uct_ivshmem_counters {
    uint64_t tx_msgs, tx_bytes;
    uint64_t rx_msgs, rx_bytes;
    uint64_t rx_dropped; /* pieces that were no whole message of ours */
    uint64_t tx_full;    /* sends that found no room (NO_RESOURCE) */
    uint64_t pending_done;
    /* remote memory access (uct_ivshmem_rma.c): bytes this process wrote
     * into (put) or read from (get) a peer's region memory, by protocol */
    uint64_t put_short, put_bcopy, put_zcopy; /* bytes */
    uint64_t get_short, get_bcopy, get_zcopy; /* bytes */
    uint64_t atomics;
    uint64_t rma_refused; /* put/get/atomics refused by the checks */
} uct_ivshmem_counters_t;

typedef struct uct_ivshmem_iface {
    uct_base_iface_t super;
    uct_ivshmem_md_t *md;
    ivshm_ep_t *chan;
    size_t max_short; /* header included */
    size_t max_bcopy;
    int same_vm;
    int stats;
    uint64_t peer_timeout_ms; /* UINT64_MAX: never judged (inf) */
    int fails_due;    /* endpoints marked failed, UCX not told yet */
    void *rx_buf;     /* private copy of a received message */
    void *tx_buf;     /* bcopy staging */
    void *get_buf;    /* get_bcopy's checked copy, before unpacking */
    int event_fd;     /* epoll: the doorbell's file and event_timer; -1 */
    int event_timer;  /* timerfd: bounds a sleep on event_fd */
    ucs_list_link_t eps;
    unsigned pending_eps; /* endpoints with a pending request */
    uct_ivshmem_counters_t cnt;
} uct_ivshmem_iface_t;

typedef struct uct_ivshmem_ep {
    uct_base_ep_t super;
    uint32_t peer;            /* channel peer index */
    ucs_queue_head_t pending; /* uct_pending_req_t, in order */
    ucs_list_link_t link;     /* in iface->eps */
    int dispatching;          /* its pending queue is running */
    ucs_status_t failed;      /* UCS_OK, or why the peer is lost for good
                               * (its sends fail with it from then on) */
    int fail_reported;        /* UCX's error handler was told */
    ivshm_identity_t peer_id; /* the peer's region and lease */
} uct_ivshmem_ep_t;

/* A memory handle (uct_ivshmem_mem.c). Peers reach only memory of the
 * region that a lease of this process owns (remote): the transport's own,
 * or another copy of libivshm's in this process (the region heap's blocks
 * and MPI_Alloc_mem buffers, found through ivshm/locate.h). Other memory,
 * private memory above all, is registered for the local side of a put or
 * get only, and its remote key says so. */
typedef struct uct_ivshmem_memh {
    void *addr;
    size_t len;
    uint64_t off;  /* region offset of addr (remote) */
    int remote;    /* in the region, owned by owner */
    ivshm_identity_t owner; /* the lease that owns it (remote) */
    int allocated; /* from mem_alloc: the region's chunks are freed with it */
    int alias;     /* a second view of the region at a fixed address */
    int private_map; /* allocated while the region was full: private */
} uct_ivshmem_memh_t;

/* A remote key as it travels: the region, the range (the owner's address
 * and the region offset), and the owner's lease. Untrusted when unpacked:
 * every field is checked, and the owner's hold on the range is asked
 * before and after each access. */
#define UCT_IVSHMEM_RKEY_MAGIC 0x4b525649u /* "IVRK" */
#define UCT_IVSHMEM_RKEY_REMOTE 0x1u
typedef struct uct_ivshmem_rkey_packed {
    uint32_t magic;
    uint32_t flags; /* UCT_IVSHMEM_RKEY_REMOTE, or 0: local use only */
    uint8_t region_uuid[16];
    uint64_t addr, off, len;
    uint64_t vm_id;
    uint32_t slot, gen, pid;
    uint32_t version; /* UCT_IVSHMEM_WIRE_VERSION */
} UCS_S_PACKED uct_ivshmem_rkey_packed_t;

/* An unpacked remote key (what uct_rkey_t points at). */
typedef struct uct_ivshmem_rkey {
    ivshm_identity_t owner; /* region UUID and the owner's lease */
    uint64_t addr, off, len;
} uct_ivshmem_rkey_t;

extern uct_component_t uct_ivshmem_component;
extern ucs_config_field_t uct_ivshmem_iface_config_table[];

UCS_CLASS_DECLARE(uct_ivshmem_iface_t, uct_md_h, uct_worker_h,
                  const uct_iface_params_t *, const uct_iface_config_t *);
UCS_CLASS_DECLARE_NEW_FUNC(uct_ivshmem_iface_t, uct_iface_t, uct_md_h,
                           uct_worker_h, const uct_iface_params_t *,
                           const uct_iface_config_t *);

UCS_CLASS_DECLARE(uct_ivshmem_ep_t, const uct_ep_params_t *);
UCS_CLASS_DECLARE_NEW_FUNC(uct_ivshmem_ep_t, uct_ep_t, const uct_ep_params_t *);
UCS_CLASS_DECLARE_DELETE_FUNC(uct_ivshmem_ep_t, uct_ep_t);

ucs_status_t uct_ivshmem_ep_am_short(uct_ep_h tl_ep, uint8_t id,
                                     uint64_t header, const void *payload,
                                     unsigned length);
ssize_t uct_ivshmem_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id,
                                uct_pack_callback_t pack_cb, void *arg,
                                unsigned flags);
ucs_status_t uct_ivshmem_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req,
                                        unsigned flags);
void uct_ivshmem_ep_pending_purge(uct_ep_h tl_ep,
                                  uct_pending_purge_callback_t cb, void *arg);
ucs_status_t uct_ivshmem_ep_flush(uct_ep_h tl_ep, unsigned flags,
                                  uct_completion_t *comp);
ucs_status_t uct_ivshmem_ep_check(uct_ep_h tl_ep, unsigned flags,
                                  uct_completion_t *comp);
/* One line on stderr in one write: glibc 2.37 and later write an
 * unbuffered stream in 128-byte pieces, and a launcher that forwards
 * several ranks' stderr interleaved the pieces of two ranks' counter
 * lines (PRRTE under Debian 13). */
void uct_ivshmem_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The peer's identity and channel address from its device and interface
 * addresses. */
void uct_ivshmem_peer_unpack(const uct_ivshmem_dev_addr_t *dev,
                             const uct_ivshmem_iface_addr_t *addr,
                             ivshm_identity_t *id,
                             uint8_t chan[IVSHM_EP_ADDR_SIZE]);
/* The doorbell as event fd (uct_ivshmem_event.c): open makes it where the
 * endpoint holds a doorbell vector (-1 elsewhere), close releases it. */
void uct_ivshmem_iface_event_open(uct_ivshmem_iface_t *iface);
void uct_ivshmem_iface_event_close(uct_ivshmem_iface_t *iface);
int uct_ivshmem_iface_has_event_fd(uct_ivshmem_iface_t *iface);
ucs_status_t uct_ivshmem_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p);
ucs_status_t uct_ivshmem_iface_event_arm(uct_iface_h tl_iface, unsigned events);
/* Fails every endpoint to channel peer `peer` (every endpoint when peer
 * is UINT32_MAX) with status; UCX's error handler hears of each on the
 * next progress call (uct_ivshmem_iface_report_fails), never inside the
 * send, check or channel event that found the failure: their callers may
 * still hold the endpoint. */
void uct_ivshmem_iface_fail_eps_later(uct_ivshmem_iface_t *iface,
                                      uint32_t peer, ucs_status_t status);
/* Tells UCX's error handler of each failed endpoint not reported yet. */
void uct_ivshmem_iface_report_fails(uct_ivshmem_iface_t *iface);
/* Runs the pending requests of every endpoint; returns how many finished. */
unsigned uct_ivshmem_iface_dispatch_pending(uct_ivshmem_iface_t *iface);

/* Memory (uct_ivshmem_mem.c). */
ucs_status_t uct_ivshmem_mem_alloc(uct_md_h tl_md, size_t *length_p,
                                   void **address_p, ucs_memory_type_t mem_type,
                                   unsigned flags, const char *alloc_name,
                                   uct_mem_h *memh_p);
ucs_status_t uct_ivshmem_mem_free(uct_md_h tl_md, uct_mem_h memh);
ucs_status_t uct_ivshmem_mem_dereg(uct_md_h tl_md,
                                   const uct_md_mem_dereg_params_t *params);
ucs_status_t uct_ivshmem_rkey_unpack(uct_component_t *component,
                                     const void *rkey_buffer,
                                     uct_rkey_t *rkey_p, void **handle_p);
ucs_status_t uct_ivshmem_rkey_release(uct_component_t *component,
                                      uct_rkey_t rkey, void *handle);
/* What the memory domain offers where it has a region. */
void uct_ivshmem_mem_caps(const uct_ivshmem_md_t *md,
                          uct_ivshmem_md_caps_t *caps);
/* The memory domain is open / closes: remote keys of its region unpack. */
void uct_ivshmem_md_track(uct_ivshmem_md_t *md, int open);

/* Remote memory access (uct_ivshmem_rma.c). */
void uct_ivshmem_rma_query(const uct_ivshmem_iface_t *iface,
                           uct_iface_attr_t *attr);
/* UCX_IVSHMEM_STATS: the remote-access counters, one line on stderr. */
ucs_status_t uct_ivshmem_ep_put_short(uct_ep_h tl_ep, const void *buffer,
                                      unsigned length, uint64_t remote_addr,
                                      uct_rkey_t rkey);
ssize_t uct_ivshmem_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb,
                                 void *arg, uint64_t remote_addr,
                                 uct_rkey_t rkey);
ucs_status_t uct_ivshmem_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                      size_t iovcnt, uint64_t remote_addr,
                                      uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_ivshmem_ep_get_short(uct_ep_h tl_ep, void *buffer,
                                      unsigned length, uint64_t remote_addr,
                                      uct_rkey_t rkey);
ucs_status_t uct_ivshmem_ep_get_bcopy(uct_ep_h tl_ep,
                                      uct_unpack_callback_t unpack_cb,
                                      void *arg, size_t length,
                                      uint64_t remote_addr, uct_rkey_t rkey,
                                      uct_completion_t *comp);
ucs_status_t uct_ivshmem_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov,
                                      size_t iovcnt, uint64_t remote_addr,
                                      uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_ivshmem_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare,
                                           uint64_t swap, uint64_t remote_addr,
                                           uct_rkey_t rkey, uint64_t *result,
                                           uct_completion_t *comp);
ucs_status_t uct_ivshmem_ep_atomic_cswap32(uct_ep_h tl_ep, uint32_t compare,
                                           uint32_t swap, uint64_t remote_addr,
                                           uct_rkey_t rkey, uint32_t *result,
                                           uct_completion_t *comp);
ucs_status_t uct_ivshmem_ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode,
                                          uint64_t value, uint64_t remote_addr,
                                          uct_rkey_t rkey);
ucs_status_t uct_ivshmem_ep_atomic32_post(uct_ep_h tl_ep, unsigned opcode,
                                          uint32_t value, uint64_t remote_addr,
                                          uct_rkey_t rkey);
ucs_status_t uct_ivshmem_ep_atomic64_fetch(uct_ep_h tl_ep, unsigned opcode,
                                           uint64_t value, uint64_t *result,
                                           uint64_t remote_addr,
                                           uct_rkey_t rkey,
                                           uct_completion_t *comp);
ucs_status_t uct_ivshmem_ep_atomic32_fetch(uct_ep_h tl_ep, unsigned opcode,
                                           uint32_t value, uint32_t *result,
                                           uint64_t remote_addr,
                                           uct_rkey_t rkey,
                                           uct_completion_t *comp);

ucs_status_t uct_ivshmem_query_devices(uct_md_h md,
                                       uct_tl_device_resource_t **devices,
                                       unsigned *num_devices);

#endif
