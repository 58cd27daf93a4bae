/*
 * libivshm channels: message passing between processes (in different VMs)
 * that map the same region.
 *
 * A domain is a job area holding a directory of endpoints. Each endpoint
 * owns a receive FIFO (multi-producer, slot claimed by CAS, published per
 * cell), grants per-pair fast boxes to hot senders, and owns a pool of
 * fragments for its own large sends. Ordering per sender-receiver pair is
 * guaranteed. An endpoint is used by one thread at a time.
 */
#ifndef IVSHM_CHANNEL_H
#define IVSHM_CHANNEL_H

#include <ivshm/ivshm.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ivshm_domain ivshm_domain_t;
typedef struct ivshm_ep ivshm_ep_t;

typedef struct ivshm_ep_config {
    uint32_t fifo_cells;     /* receive FIFO cells, power of two */
    uint32_t cell_size;      /* bytes per cell (multiple of 64) */
    uint32_t fbox_cells;     /* cells per fast box, power of two (0: none) */
    uint32_t fbox_threshold; /* sends to a peer before asking a fast box */
    uint32_t fbox_budget;    /* fast boxes this receiver grants at most */
    uint32_t frag_count;     /* fragments in this endpoint's send pool */
    uint32_t frag_size;      /* bytes per fragment */
    uint32_t max_per_poll;   /* messages handled per progress call, max */
} ivshm_ep_config_t;

/* Bytes of a cell that a whole message of at most cell_size minus this
 * travels inline with (larger ones take a fragment). */
#define IVSHM_CELL_OVERHEAD 32u

/* Defaults, then overrides from the environment: IVSHM_FIFO_CELLS,
 * IVSHM_CELL_SIZE, IVSHM_FBOX_CELLS, IVSHM_FBOX_THRESHOLD,
 * IVSHM_FBOX_BUDGET, IVSHM_FRAG_COUNT, IVSHM_FRAG_SIZE. */
void ivshm_ep_config_init(ivshm_ep_config_t *c);
/* The two halves, for a front end with defaults of its own (the MPI
 * component, the UCT transport): the table's defaults, then, over
 * whatever the caller set in between, each IVSHM_* variable that is set
 * and not empty. */
void ivshm_ep_config_defaults(ivshm_ep_config_t *c);
void ivshm_ep_config_env(ivshm_ep_config_t *c);
/* The configuration table: entry i (NULL past the end), for tools and
 * docs (`ivshm config`). */
typedef struct ivshm_config_param {
    const char *env;  /* environment variable */
    uint32_t def, min, max;
    int pow2;         /* must be a power of two (or 0 where min is 0) */
    const char *doc;
} ivshm_config_param_t;
const ivshm_config_param_t *ivshm_ep_config_param(unsigned i);
/* Validates a configuration; names the bad field in ivshm_last_error(). */
ivshm_status_t ivshm_ep_config_check(const ivshm_ep_config_t *c);

/* Joins (creating) the domain of a job: key names the job, max_eps bounds
 * the endpoints. The region must be attached. */
ivshm_status_t ivshm_domain_join(ivshm_region_t *r, const char *key,
                                 uint32_t max_eps, ivshm_domain_t **out);
void ivshm_domain_leave(ivshm_domain_t *d);

/* A received message piece. Messages longer than one cell or fragment come
 * as several pieces in order (offset grows to total). data is valid during
 * the handler call only. */
typedef struct ivshm_msg {
    uint32_t sender; /* peer index (as given by ivshm_ep_connect) */
    uint32_t tag;
    const void *data;
    uint32_t len;
    uint64_t offset; /* of this piece in the message */
    uint64_t total;  /* message length */
} ivshm_msg_t;

typedef void (*ivshm_msg_handler_t)(void *arg, const ivshm_msg_t *m);
/* A whole message (one piece: offset 0, total == len), without the
 * piece's fields: where set (ivshm_ep_set_whole_handler), every whole
 * message goes here, with the message handler's arg, and the message
 * handler sees only the pieces of longer messages. The usual small
 * message of a fast box reaches it without a descriptor being built
 * (docs/channels.md, "The whole-message handler"). sender, tag and len are as in
 * ivshm_msg_t (the sender wrote tag and len: untrusted). */
typedef void (*ivshm_whole_handler_t)(void *arg, uint32_t sender,
                                      uint32_t tag, const void *data,
                                      uint32_t len);

enum ivshm_event_kind {
    IVSHM_EV_PEER_DEAD = 1, /* a peer's lease is gone; its resources freed */
    /* our own lease was reclaimed (this process stalled longer than the
     * region's lease timeout): the endpoint stops touching the region, every
     * later call fails with IVSHM_ERR_LEASE_LOST; peer is our own index */
    IVSHM_EV_LEASE_LOST = 2,
};
/* An event handler is a handler as the message handlers are: it may run
 * in the middle of a progress pass, and its own ivshm_ep_progress
 * delivers nothing. */
typedef void (*ivshm_event_handler_t)(void *arg, int kind, uint32_t peer);

/* Creates an endpoint at directory index `index` (or any free one with
 * index < 0). Allocates its control block, FIFO and fragment pool from the
 * region, owned by this process' lease. */
ivshm_status_t ivshm_ep_create(ivshm_domain_t *d, int index,
                               const ivshm_ep_config_t *cfg,
                               ivshm_msg_handler_t handler, void *arg,
                               ivshm_ep_t **out);
void ivshm_ep_destroy(ivshm_ep_t *ep);
uint32_t ivshm_ep_index(const ivshm_ep_t *ep);
void ivshm_ep_set_event_handler(ivshm_ep_t *ep, ivshm_event_handler_t h,
                                void *arg);
/* Sets (or, with NULL, clears) the handler of whole messages; call it
 * before the endpoint's first progress. */
void ivshm_ep_set_whole_handler(ivshm_ep_t *ep, ivshm_whole_handler_t h);

#define IVSHM_EP_ADDR_SIZE 48
/* The endpoint's address: an opaque blob for a modex. */
ivshm_status_t ivshm_ep_address(const ivshm_ep_t *ep,
                                uint8_t addr[IVSHM_EP_ADDR_SIZE]);
/* The address of the endpoint at directory index `index` of domain d, read
 * from the directory (for callers without a modex); IVSHM_ERR_NOT_FOUND if
 * no live endpoint is there. */
ivshm_status_t ivshm_domain_address(ivshm_domain_t *d, uint32_t index,
                                    uint8_t addr[IVSHM_EP_ADDR_SIZE]);
/* Connects to a peer from its address; the peer index it returns is what
 * the receive handler reports as sender (it is the peer's directory index).
 * IVSHM_ERR_NOT_FOUND if the address names another region or a gone
 * endpoint, IVSHM_ERR_CORRUPT if its published layout fails validation,
 * IVSHM_ERR_AGAIN if the peer's lease was in doubt (a collector judging
 * it) for all of the second this call waits for the doubt to end.
 * Connecting to the same life again changes nothing. A new life at an
 * index whose earlier life we had not seen end (met here, or by its first
 * message) ends that one first: IVSHM_EV_PEER_DEAD for the index, from
 * inside this call (or the progress pass), before the index means the new
 * life. */
ivshm_status_t ivshm_ep_connect(ivshm_ep_t *ep, const uint8_t *addr,
                                size_t len, uint32_t *peer);

/* Sends len bytes; returns once every piece is handed over (the buffer is
 * reusable). Progresses the endpoint while it waits for room, so two
 * endpoints that send to each other cannot deadlock. */
ivshm_status_t ivshm_ep_send(ivshm_ep_t *ep, uint32_t peer, uint32_t tag,
                             const void *buf, size_t len);
/* One attempt for a message of at most one cell or one fragment:
 * IVSHM_ERR_AGAIN when there is no room right now. */
ivshm_status_t ivshm_ep_try_send(ivshm_ep_t *ep, uint32_t peer, uint32_t tag,
                                 const void *buf, size_t len);
/* One attempt at a message of two parts (a protocol header and its data),
 * copied straight into one cell of the peer: reserve, two copies and
 * commit in one call, for the small messages a message rate is made of.
 * A whole message goes into the peer's fast box where it takes it
 * (ivshm_ep_box_msg_max); else, where head_len + body_len is not inline
 * in a cell of this peer (its cells may be smaller than ours), the two
 * parts go into one fragment, as ivshm_ep_try_send's would.
 * IVSHM_ERR_INVAL above ivshm_ep_max_single (a peer that cannot be sent
 * to is reported first, as by any send; a refused send has no effect on
 * the peer), IVSHM_ERR_AGAIN when there is no room right now. */
ivshm_status_t ivshm_ep_try_send2(ivshm_ep_t *ep, uint32_t peer, uint32_t tag,
                                  const void *head, size_t head_len,
                                  const void *body, size_t body_len);
/* Largest message try_send/reserve take. */
size_t ivshm_ep_max_single(const ivshm_ep_t *ep);
/* Longest message a fast box of this endpoint's geometry takes whole, as
 * one entry: a peer configured alike takes the same (each receiver's own
 * geometry decides). Up to it, ivshm_ep_try_send2 and ivshm_ep_try_send
 * copy a message once into the peer's box where it has room, else into a
 * cell or a fragment; one longer than a cell only in answer (something
 * came in from that peer since the last such message) and while at most
 * a quarter of the box is in use (docs/channels.md, "Box messages longer
 * than a cell"). 0 where this endpoint's boxes take no messages. */
size_t ivshm_ep_box_msg_max(const ivshm_ep_t *ep);

/* Zero-copy: reserve room for len bytes (<= ivshm_ep_max_single) towards
 * peer and build the message in *buf, then commit it (or cancel). Never
 * blocks: IVSHM_ERR_AGAIN when there is no room now. Between reserve and
 * commit the peer's queue holds our unpublished cell: keep it short. */
typedef struct ivshm_rsv {
    void *cell;
    uint64_t pos;
    uint32_t peer;
    int32_t frag; /* a fragment; negative: payload inline in the cell
                   * (-1 after the full header, -2 short) */
    uint32_t len;
    uint64_t lend; /* the fragment's loan number */
} ivshm_rsv_t;
ivshm_status_t ivshm_ep_reserve(ivshm_ep_t *ep, uint32_t peer, size_t len,
                                void **buf, ivshm_rsv_t *rsv);
/* The same with only one of our fragments held (no cell yet): the caller
 * may take its time filling *buf, nobody waits on it. For messages that do
 * not fit a cell of the peer (IVSHM_ERR_NOTSUP otherwise: send them
 * inline); IVSHM_ERR_AGAIN when no fragment is free. The cell is claimed
 * at commit, which answers IVSHM_ERR_AGAIN while the peer's queues are
 * full: the reservation stays valid, commit it again later. */
ivshm_status_t ivshm_ep_reserve_frag(ivshm_ep_t *ep, uint32_t peer, size_t len,
                                     void **buf, ivshm_rsv_t *rsv);
/* Publishes len bytes (<= the reserved length) with tag. */
ivshm_status_t ivshm_ep_commit(ivshm_ep_t *ep, const ivshm_rsv_t *rsv,
                               uint32_t tag, size_t len);
/* Gives the reservation back (the receiver skips its cell, if any). */
void ivshm_ep_cancel(ivshm_ep_t *ep, const ivshm_rsv_t *rsv);

/* Single copy: a buffer that already lives in the region (allocated with
 * ivshm_alloc) is handed over by offset; the receiver copies from it.
 * *ticket completes when ivshm_ep_region_done() says so; the buffer must
 * not change before. */
ivshm_status_t ivshm_ep_send_region(ivshm_ep_t *ep, uint32_t peer,
                                    uint32_t tag, uint64_t off, size_t len,
                                    uint64_t *ticket);
int ivshm_ep_region_done(ivshm_ep_t *ep, uint32_t peer, uint64_t ticket);

/* One-sided access to a peer's buffer named by region offset (an MPI
 * put/get handle): IVSHM_OK if every chunk of [off, off+len) belongs to
 * the peer's live lease; IVSHM_ERR_PEER_DEAD if that lease ended or is
 * being reclaimed, IVSHM_ERR_INVAL if the range is not its memory. After
 * a read, ivshm_ep_peer_alive() says whether the lease still held (if not,
 * the bytes may be a new owner's: discard them). */
ivshm_status_t ivshm_ep_peer_holds(ivshm_ep_t *ep, uint32_t peer,
                                   uint64_t off, uint64_t len);
ivshm_status_t ivshm_ep_peer_alive(ivshm_ep_t *ep, uint32_t peer);
/* A peer's silence, for a caller that judges peers in doubt itself (the
 * UCX transport's keepalive): *silent_ms is how long the peer's lease has
 * gone without a heartbeat once that exceeds the region's lease timeout
 * and its death cannot be proven from here (another VM: it may be
 * paused), else 0. IVSHM_ERR_PEER_DEAD if its lease ended or its death is
 * proven. Reclaims nothing: what the peer owns stays its own. */
ivshm_status_t ivshm_ep_peer_silence(ivshm_ep_t *ep, uint32_t peer,
                                     uint64_t *silent_ms);

/* Handles up to cfg.max_per_poll received pieces; returns how many.
 * Called from inside a handler it handles nothing and returns 0: the
 * pieces after the one being handled come, in order, once the handler
 * has returned. */
int ivshm_ep_progress(ivshm_ep_t *ep);
/* The same, for an endpoint whose whole-message handler is `whole`
 * (ivshm_ep_set_whole_handler): a caller that names it here, a constant,
 * lets a compiler that inlines the channel into it call the handler
 * directly on the usual path. Another `whole` (NULL included) is ignored:
 * the call is then ivshm_ep_progress. */
int ivshm_ep_progress_whole(ivshm_ep_t *ep, ivshm_whole_handler_t whole);
/* Blocks until something arrives or timeout_ms passes (-1: forever):
 * arms the wake-up bit, re-checks, then waits on the notifier. Returns
 * IVSHM_OK or IVSHM_ERR_AGAIN on timeout; IVSHM_ERR_AGAIN at once from
 * inside a handler, where nothing is delivered (ivshm_ep_progress);
 * IVSHM_ERR_LEASE_LOST (there too) once this process' lease is lost. */
ivshm_status_t ivshm_ep_wait(ivshm_ep_t *ep, int timeout_ms);
/* The same wait from the caller's own poll loop (an event fd, as UCT's
 * iface_event_fd_get/event_arm). ivshm_ep_event_fd: a file descriptor
 * that turns readable when a peer rings us, or -1 where the endpoint has
 * no doorbell vector (then only polling works). ivshm_ep_arm: IVSHM_OK
 * when it is safe to sleep on the fd (the next send will ring);
 * IVSHM_ERR_AGAIN when something waits or may arrive unannounced (call
 * ivshm_ep_progress, then arm again: the first arms of an endpoint say
 * AGAIN for 1 ms while senders learn to ring); IVSHM_ERR_NOTSUP without
 * an fd.
 * A sleeper that wants liveness and lost-interrupt recovery bounds its
 * sleep (ivshm_ep_wait re-checks every 100 ms). */
int ivshm_ep_event_fd(ivshm_ep_t *ep);
ivshm_status_t ivshm_ep_arm(ivshm_ep_t *ep);

/* Wake-up seam. Endpoints of a dev: region whose device is an
 * ivshmem-doorbell use the guest driver's interrupts (a blocked receiver
 * sleeps in the kernel; $IVSHM_DOORBELL=0 turns this off); all others poll
 * with back-off. Another notifier can be set here. */
typedef struct ivshm_notifier {
    /* Wakes the owner of the endpoint at directory index peer. */
    void (*ring)(void *ctx, uint32_t peer_index);
    /* Waits until *word != seen or timeout (ns; UINT64_MAX forever). */
    ivshm_status_t (*wait)(void *ctx, const volatile uint64_t *word,
                           uint64_t seen, uint64_t timeout_ns);
    void *ctx;
} ivshm_notifier_t;
void ivshm_ep_set_notifier(ivshm_ep_t *ep, const ivshm_notifier_t *n);

typedef struct ivshm_ep_stats {
    uint64_t msgs_in, bytes_in;    /* pieces received */
    uint64_t msgs_out, bytes_out;  /* pieces sent */
    uint64_t stalls_full;          /* sends that found no room */
    uint64_t invalid_dropped;      /* bad entries dropped */
    uint64_t dead_peers;           /* peers found dead */
    uint64_t fbox_granted, fbox_used;
    uint64_t wakeups;              /* blocked receivers woken */
    uint64_t doorbell_irqs;        /* interrupts that woke this receiver */
    int32_t doorbell_vector;       /* our doorbell vector, -1: none */
} ivshm_ep_stats_t;
void ivshm_ep_stats(const ivshm_ep_t *ep, ivshm_ep_stats_t *s);

/* Walks the endpoints of every domain in the region (for `ivshm stat`).
 * The message counts are those an endpoint's progress last mirrored (a
 * pass that delivered, a receiver of one box's first call that finds it
 * empty after it delivered, or every 1,024th call); ivshm_ep_stats has
 * the current ones of our own endpoints. */
typedef void (*ivshm_ep_visit_fn)(void *arg, const char *job, uint32_t index,
                                  uint32_t pid, const ivshm_ep_stats_t *s);
ivshm_status_t ivshm_region_endpoints(ivshm_region_t *r, ivshm_ep_visit_fn fn,
                                      void *arg);

/* Checks a domain's shared layout (directory entries, control blocks):
 * IVSHM_OK or the first problem, reported through report(). */
ivshm_status_t ivshm_domain_valid(ivshm_domain_t *d, ivshm_report_fn report,
                                  void *arg);

#ifdef __cplusplus
}
#endif
#endif
