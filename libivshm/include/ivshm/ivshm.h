/*
 * libivshm public API: shared regions (an ivshmem BAR2 or a file), the region
 * format, the registry of attached processes with leases, job areas, the
 * chunk allocator and co-residency.
 *
 * Everything the library reads from a region is treated as untrusted input:
 * another VM may write any byte at any time (docs/shared-loads.md lists
 * every load and how it is checked).
 */
#ifndef IVSHM_IVSHM_H
#define IVSHM_IVSHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One status enum for the whole library; values are stable (the CLI uses
 * them as exit codes). */
typedef enum ivshm_status {
    IVSHM_OK = 0,
    IVSHM_ERR_INVAL = 2,          /* bad argument or URI */
    IVSHM_ERR_NOENT = 3,          /* file or device does not exist */
    IVSHM_ERR_PERM = 4,           /* permission denied */
    IVSHM_ERR_NODEV = 5,          /* no ivshmem PCI device found */
    IVSHM_ERR_AMBIGUOUS = 6,      /* several devices, none chosen */
    IVSHM_ERR_TOO_SMALL = 7,      /* region below the minimum size */
    IVSHM_ERR_UNFORMATTED = 8,    /* region holds no format yet */
    IVSHM_ERR_BAD_MAGIC = 9,      /* region holds something else */
    IVSHM_ERR_VERSION = 10,       /* another layout version */
    IVSHM_ERR_CORRUPT = 11,       /* a field fails validation */
    IVSHM_ERR_SIZE_MISMATCH = 12, /* header size differs from mapping */
    IVSHM_ERR_REGISTRY_FULL = 13, /* no free registry slot */
    IVSHM_ERR_NOSPACE = 14,       /* region (or a table) is full */
    IVSHM_ERR_BUSY = 15,          /* formatting in progress / in use */
    IVSHM_ERR_LEASE_LOST = 16,    /* our lease was reclaimed */
    IVSHM_ERR_EXISTS = 17,        /* already formatted / exists */
    IVSHM_ERR_NOT_FOUND = 18,     /* no such entry */
    IVSHM_ERR_PEER_DEAD = 19,     /* peer's lease is gone */
    IVSHM_ERR_AGAIN = 20,         /* try again (ring full, no message) */
    IVSHM_ERR_TRUNCATED = 21,     /* buffer too small for the message */
    IVSHM_ERR_NOTSUP = 22,        /* not supported by this provider */
    IVSHM_ERR_SYS = 23,           /* other system error (see errno text) */
    IVSHM_ERR_QUOTA = 24,         /* the job's region-heap quota is spent */
} ivshm_status_t;

/* Short text of a status. */
const char *ivshm_strerror(ivshm_status_t st);
/* Full sentence for the last failure in this thread (names the path, the
 * field or the fix); never NULL. */
const char *ivshm_last_error(void);

#define IVSHM_LAYOUT_VERSION 4u
#define IVSHM_MIN_REGION_SIZE (1ull << 20)
#define IVSHM_ENV_REGION "IVSHM_REGION" /* default URI */
#define IVSHM_ENV_VM_ID "IVSHM_VM_ID"   /* override the VM identity */
/* auto: the guest driver's device (dev:auto) when the driver is loaded,
 * else the BAR through sysfs (pci:auto) */
#define IVSHM_DEFAULT_URI "auto"

typedef struct ivshm_region ivshm_region_t;

typedef struct ivshm_format_opts {
    uint64_t size;             /* bytes; 0 = keep the existing size */
    uint32_t chunk_size;       /* allocator unit, power of two >= 4 KiB */
    uint32_t reg_slots;        /* registry entries (processes) */
    uint32_t job_slots;        /* job table entries */
    uint32_t lease_timeout_ms; /* heartbeat age after which a lease expires */
    int hugepages;             /* file must live on hugetlbfs */
    int force;                 /* reformat a region that is already valid */
    mode_t mode;               /* new file's mode (0 = 0660) */
} ivshm_format_opts_t;

void ivshm_format_opts_init(ivshm_format_opts_t *o);

/* Creates (file: URIs) and formats a region. Refuses an already formatted
 * region unless opts->force. */
ivshm_status_t ivshm_format(const char *uri, const ivshm_format_opts_t *opts);

enum {
    IVSHM_OPEN_RDONLY = 1u << 0,     /* map read-only (info, check) */
    IVSHM_OPEN_NOVALIDATE = 1u << 1, /* map even when the header is bad */
};

/* Maps the region named by uri (NULL: $IVSHM_REGION, else pci:auto) and
 * validates its header. Spellings: file:PATH, pci:auto, pci:DDDD:BB:DD.F
 * (also pci:BB:DD.F). On failure *out is NULL and ivshm_last_error() says
 * why. With IVSHM_OPEN_NOVALIDATE the region is returned with the header
 * status as return value (for `ivshm check`). */
ivshm_status_t ivshm_region_open(const char *uri, unsigned flags,
                                 ivshm_region_t **out);
/* Detaches (if attached) and unmaps. */
void ivshm_region_close(ivshm_region_t *r);
/* Leaves the pages [addr, addr + len) of the mapping alone when the region
 * is unmapped: the caller has replaced them with memory of its own (the
 * region heap moves live buffers to private memory at the same address,
 * ivshm/heap.h). Page-aligned ranges inside the mapping only. */
ivshm_status_t ivshm_region_keep_range(ivshm_region_t *r, void *addr,
                                       size_t len);

const char *ivshm_region_uri(const ivshm_region_t *r);
/* Maps [off, off + len) of the region a second time, at exactly addr
 * (which must be free: nothing is replaced), for memory a caller must place
 * at a given address (UCX's fixed allocations, OpenSHMEM's symmetric heap).
 * Page-aligned; the caller unmaps it (munmap) before it frees the range.
 * The SIGBUS guard does not cover this view. */
ivshm_status_t ivshm_region_map_alias(ivshm_region_t *r, uint64_t off,
                                      uint64_t len, void *addr);
uint64_t ivshm_region_size(const ivshm_region_t *r);
void ivshm_region_uuid(const ivshm_region_t *r, uint8_t uuid[16]);
/* Base of the mapping: for channels and benchmarks that place data in
 * areas they own; offsets handed between processes are always checked. */
void *ivshm_region_base(const ivshm_region_t *r);
/* Guards the mapping against the device going away (hot-unplug, a
 * truncated file): an access then raises SIGBUS, which the guard turns into
 * one message on stderr naming the region and the cause, and _exit with
 * IVSHM_EXIT_REGION_GONE. Other SIGBUS faults go to the handler installed
 * before. Up to 8 regions per process; released by ivshm_region_close. */
#define IVSHM_EXIT_REGION_GONE 75
ivshm_status_t ivshm_region_guard(ivshm_region_t *r);
/* The memory type of the mapping, in words (`ivshm info` prints it): the
 * channels need write-back or uncached memory, never write-combined. */
const char *ivshm_region_memtype(const ivshm_region_t *r);
void ivshm_uuid_str(const uint8_t uuid[16], char out[37]);

/* ---- registry: attached processes and their leases ---- */

/* Claims a registry slot for this process (tries a reclaim of dead leases
 * when the registry is full). */
ivshm_status_t ivshm_attach(ivshm_region_t *r);
/* Releases the slot and every resource it owns. */
ivshm_status_t ivshm_detach(ivshm_region_t *r);
/* Refreshes the heartbeat; IVSHM_ERR_LEASE_LOST if a reclaimer took the
 * slot meanwhile (this process was judged dead: it must re-attach).
 * Cheap: at most one clock read when called more often than needed. */
ivshm_status_t ivshm_lease_renew(ivshm_region_t *r);
/* Starts a thread that renews the lease every timeout/4. */
ivshm_status_t ivshm_lease_start_thread(ivshm_region_t *r);

typedef struct ivshm_gc_stats {
    unsigned procs_reclaimed;
    unsigned jobs_reclaimed;
    unsigned chunks_freed; /* a reclaimed process' chunks cool first */
    unsigned procs_in_doubt; /* expired leases kept: death not proven */
} ivshm_gc_stats_t;
/* Reclaims the leases of processes proven dead (this VM: pid gone or
 * reused; any VM: a claim that expired before it owned anything), jobs
 * with no live member and chunks whose owner is gone. A lease of another
 * VM whose heartbeat expired is only in doubt (its VM may be paused): it
 * is kept with everything it owns (docs/lifetimes.md). The chunks of a
 * reclaimed process cool for one lease timeout before anybody gets them. */
ivshm_status_t ivshm_gc(ivshm_region_t *r, ivshm_gc_stats_t *stats);

/* ---- identity and co-residency ---- */

/* What a process publishes (e.g. in an MPI modex): 40 bytes, fixed
 * little-endian layout, safe to copy between processes. */
typedef struct ivshm_identity {
    uint8_t region_uuid[16];
    uint64_t vm_id;
    uint32_t slot;
    uint32_t gen;
    uint32_t pid;
    uint32_t reserved;
} ivshm_identity_t;

ivshm_status_t ivshm_self_identity(const ivshm_region_t *r,
                                   ivshm_identity_t *id);
/* This VM's identity: $IVSHM_VM_ID hashed if set, else a hash of the boot
 * id, the network and UTS namespaces and the host name. */
uint64_t ivshm_vm_id(void);

typedef enum ivshm_locality {
    IVSHM_PEER_REMOTE = 0,    /* maps another region (or none): network */
    IVSHM_PEER_STALE = 1,     /* claims our region but holds no live lease */
    IVSHM_PEER_OTHER_VM = 2,  /* same region, different VM: co-resident */
    IVSHM_PEER_SAME_VM = 3,   /* same region, same VM */
    IVSHM_PEER_SELF = 4,
} ivshm_locality_t;

/* Decides locality from the region itself: the peer's slot must hold a
 * live lease of the same generation and VM id. */
ivshm_locality_t ivshm_peer_locality(ivshm_region_t *r,
                                     const ivshm_identity_t *peer);
/* The same, for a decision that lasts the job (which transport reaches the
 * peer): a lease in doubt (a collector judging it, which may still back
 * off) is waited for, up to a second, and only then called stale. */
ivshm_locality_t ivshm_peer_locality_settled(ivshm_region_t *r,
                                             const ivshm_identity_t *peer);
const char *ivshm_locality_str(ivshm_locality_t l);

/* ---- chunk allocator ---- */

/* Allocates size bytes (rounded up to chunks) owned by this process' lease;
 * freed when it detaches or is reclaimed. Returns the region offset. */
ivshm_status_t ivshm_alloc(ivshm_region_t *r, uint64_t size, uint64_t *off);
ivshm_status_t ivshm_free(ivshm_region_t *r, uint64_t off);
/* A region-heap block (docs/heap.md, "Quota"): as ivshm_alloc, and counted
 * in this process' registry slot. IVSHM_ERR_QUOTA when the region-heap
 * blocks of a job this process belongs to (of this process alone, in none)
 * would pass quota bytes: every live member's count is summed, so a dead
 * member's blocks stop counting when its lease ends. Free such blocks with
 * ivshm_free_heap_block only. */
ivshm_status_t ivshm_alloc_heap_block(ivshm_region_t *r, uint64_t size,
                                      uint64_t quota, uint64_t *off);
ivshm_status_t ivshm_free_heap_block(ivshm_region_t *r, uint64_t off);
/* Whether [off, off+len) is wholly memory allocated by the process that
 * published owner, and its lease still holds: IVSHM_OK, IVSHM_ERR_PEER_DEAD
 * (lease ended), IVSHM_ERR_INVAL (not its memory, or another region). For
 * memory that several processes share by offset (collective areas). */
ivshm_status_t ivshm_region_owned(ivshm_region_t *r,
                                  const ivshm_identity_t *owner, uint64_t off,
                                  uint64_t len);
/* The region offset of [p, p + len) in this mapping of r, or UINT64_MAX
 * where it does not lie wholly inside (len 0 counts as 1 byte). */
uint64_t ivshm_region_offset_of(const ivshm_region_t *r, const void *p,
                                uint64_t len);
/* Where [p, p + len) (len > 0) is memory of this mapping that this
 * process' live lease owns: IVSHM_OK with its offset and the owner (this
 * process' identity), which a peer's checks then hold to; IVSHM_ERR_INVAL
 * otherwise. For a front end that hands its own region memory to peers
 * (registrations, remote keys). */
ivshm_status_t ivshm_region_locate(ivshm_region_t *r, const void *p,
                                   uint64_t len, uint64_t *off,
                                   ivshm_identity_t *owner);

/* ---- job areas ---- */

typedef struct ivshm_job ivshm_job_t;
#define IVSHM_JOB_KEY_MAX 47

/* Joins (creating if needed) the job named key; the first member allocates
 * an area of area_size bytes, owned by the job until its last member is
 * gone. All members see the same area. */
ivshm_status_t ivshm_job_join(ivshm_region_t *r, const char *key,
                              uint64_t area_size, ivshm_job_t **out);
void ivshm_job_leave(ivshm_job_t *j);
uint64_t ivshm_job_area_off(const ivshm_job_t *j);
uint64_t ivshm_job_area_size(const ivshm_job_t *j);
uint32_t ivshm_job_index(const ivshm_job_t *j);

/* ---- inspection (ivshm info / check) ---- */

typedef struct ivshm_region_info {
    uint8_t uuid[16];
    uint32_t version;
    uint64_t size;
    uint64_t created_ns;
    uint32_t chunk_size, chunk_count, chunks_used;
    uint32_t reg_slots, reg_used;
    uint32_t job_slots, job_used;
    uint32_t lease_timeout_ms;
    uint64_t heap_off;
    uint32_t chunks_cooling; /* among chunks_used: a dead owner's, cooling */
    uint32_t reg_in_doubt;   /* among reg_used: leases in doubt */
} ivshm_region_info_t;

typedef struct ivshm_proc_info {
    uint32_t slot, gen, pid;
    int state; /* 0 free, 1 claiming, 2 alive, 3 reclaiming */
    uint64_t vm_id;
    int64_t heartbeat_age_ms;
    uint32_t job; /* number of jobs it is a member of */
    uint32_t chunks;
    char host[33];
    char comm[17];
    int in_doubt; /* alive, heartbeat older than the lease timeout, death
                   * not provable from here (docs/lifetimes.md) */
} ivshm_proc_info_t;

/* ivshm_gc, and the admin's proof of death for every lease in doubt: each
 * one is released (after its owner had one last chance to answer, as for
 * any reclaim) and described to released (may be NULL) just before. For
 * `ivshm gc --force`, once the VMs of those leases are known to be gone. */
typedef void (*ivshm_gc_release_fn)(void *arg, const ivshm_proc_info_t *p);
ivshm_status_t ivshm_gc_force(ivshm_region_t *r, ivshm_gc_release_fn released,
                              void *arg, ivshm_gc_stats_t *stats);

typedef struct ivshm_job_info {
    uint32_t slot, gen;
    int state;
    char key[IVSHM_JOB_KEY_MAX + 1];
    uint64_t area_off, area_size;
    uint32_t members; /* leases alive or in doubt (job gc keeps the job) */
} ivshm_job_info_t;

ivshm_status_t ivshm_region_info(ivshm_region_t *r, ivshm_region_info_t *i);
/* Fill p for registry slot i; IVSHM_ERR_NOT_FOUND past the end. */
ivshm_status_t ivshm_region_proc(ivshm_region_t *r, uint32_t i,
                                 ivshm_proc_info_t *p);
ivshm_status_t ivshm_region_job(ivshm_region_t *r, uint32_t i,
                                ivshm_job_info_t *j);

/* Validates the whole layout; calls report() once per problem found and
 * returns IVSHM_OK or the first problem's status. */
typedef void (*ivshm_report_fn)(void *arg, ivshm_status_t st,
                                const char *msg);
ivshm_status_t ivshm_region_check(ivshm_region_t *r, ivshm_report_fn report,
                                  void *arg);

/* ---- device discovery (ivshm list) ---- */

typedef struct ivshm_pci_dev {
    char addr[32];   /* 0000:00:04.0 */
    uint64_t size;   /* BAR2 bytes */
    int revision;
    int has_doorbell; /* BAR1 (MSI-X) present: ivshmem-doorbell */
    int accessible;   /* resource2 can be opened read-write */
    char chardev[32]; /* /dev/ivshmemN when the guest driver is bound */
} ivshm_pci_dev_t;

/* Lists 1af4:1110 devices under $IVSHM_SYSFS_ROOT or /sys. */
int ivshm_pci_list(ivshm_pci_dev_t *devs, int max);

#ifdef __cplusplus
}
#endif
#endif
