/*
 * Shared layout of the channel layer (domains, endpoint control blocks,
 * cells, fast boxes) and the ring arithmetic it relies on.
 *
 * Domain = a job area holding a directory of 64-byte entries, one per
 * endpoint index. An entry names its owner's lease and the offset of the
 * endpoint's control block, which the owner allocated from its lease:
 *
 *   control block: [geometry][head][tail][notify][rx stats][tx stats]
 *                  [fbox grants: u64 x max_eps]   (written by this receiver)
 *                  [region done: u64 x max_eps]   (written by receivers)
 *                  [frag done:   u64 x frag_count](written by receivers)
 *                  [FIFO cells]
 *                  [fragment pool: frag_count x frag_size]
 */
#ifndef IVSHM_CHAN_LAYOUT_H
#define IVSHM_CHAN_LAYOUT_H

#include "internal.h"
#include "ivshm/channel.h"

#define CTL_MAGIC 0x364c5443484d5649ull /* "IVMHCTL6": this layout */
/* earlier layouts, refused by name: "IVMHCTL1" (libivshm <= 0.3),
 * "IVMHCTL2" (cells without the short form), "IVMHCTL3" (fast boxes of
 * fixed cells), "IVMHCTL4" (box messages no longer than a cell's inline
 * room) and "IVMHCTL5" (a box entry packed where the next one of its
 * size would cross a line) */
#define CTL_MAGIC_OLD(m)                                                     \
    ((m) == 0x314c5443484d5649ull || (m) == 0x324c5443484d5649ull ||         \
     (m) == 0x334c5443484d5649ull || (m) == 0x344c5443484d5649ull ||         \
     (m) == 0x354c5443484d5649ull)
#define CTL_LAYOUT 6u
#define DIR_ENTRY_SIZE 64u
#define MAX_EPS_LIMIT 65535u

enum dir_state { DIR_FREE = 0, DIR_CLAIMING = 1, DIR_READY = 2 };
#define DIR_WORD(gen, slot, st)                                              \
    (((uint64_t)(gen) << 32) | (((uint64_t)(slot)&0xffffffu) << 8) | (st))
#define DIR_GEN(w) ((uint32_t)((w) >> 32))
#define DIR_SLOT(w) ((uint32_t)(((w) >> 8) & 0xffffffu))
#define DIR_STATE(w) ((unsigned)((w)&0xffu))

struct dir_entry {
    _Atomic uint64_t word;    /* owner lease (gen, slot) + state */
    _Atomic uint64_t ctl_off; /* region offset of the control block */
    uint64_t ctl_size;
    uint32_t pid;
    /* bumped on every claim of this index (E0: before READY is published):
     * (word, epoch) names one life of one endpoint */
    _Atomic uint32_t epoch;
    _Atomic uint32_t doorbell; /* owner's doorbell (doorbell.h), 0: none */
    uint8_t pad[28];
};
_Static_assert(sizeof(struct dir_entry) == DIR_ENTRY_SIZE, "dir entry");

/* Everything a peer relies on is published here and validated by it: a
 * receiver's FIFO and fast boxes are sized by the receiver's numbers, a
 * sender's fragments by the sender's. */
struct ctl_geom {
    uint64_t magic;
    uint32_t index;
    uint32_t epoch; /* the directory epoch this block was made for */
    uint32_t max_eps;
    uint32_t fifo_cells;
    uint32_t cell_size;
    uint32_t fbox_cells; /* cells of each fast box this receiver grants */
    uint32_t frag_count;
    uint32_t frag_size;
    uint64_t grants_off; /* all offsets relative to the control block */
    uint64_t rdone_off;
    uint64_t fdone_off;
    uint64_t cells_off;
    uint64_t pool_off;
    uint64_t total; /* bytes of the control block */
};

struct ep_ctl {
    struct ctl_geom g;
    _Atomic uint64_t head IVSHM_ALIGNED;   /* producers: claim by CAS */
    _Atomic uint64_t tail IVSHM_ALIGNED;   /* consumer: released up to */
    _Atomic uint64_t notify IVSHM_ALIGNED; /* bit 0 armed, rest counter */
    _Atomic uint32_t may_block; /* set before the receiver's first wait */
    /* rx stats, written by the owner only */
    _Atomic uint64_t msgs_in IVSHM_ALIGNED;
    _Atomic uint64_t bytes_in;
    _Atomic uint64_t invalid;
    _Atomic uint64_t dead_peers;
    _Atomic uint64_t fbox_granted;
    /* tx stats, written by the owner only */
    _Atomic uint64_t msgs_out IVSHM_ALIGNED;
    _Atomic uint64_t bytes_out;
    _Atomic uint64_t stalls;
    _Atomic uint64_t fbox_used;
    _Atomic uint64_t wakeups;
};
_Static_assert(sizeof(struct ctl_geom) == 88, "geometry: within two lines");
_Static_assert(offsetof(struct ep_ctl, head) == 128, "head on its own line");
_Static_assert(offsetof(struct ep_ctl, tail) == 192, "tail on its own line");
_Static_assert(offsetof(struct ep_ctl, notify) == 256, "notify line");
_Static_assert(offsetof(struct ep_ctl, msgs_in) == 320, "rx stats line");
_Static_assert(offsetof(struct ep_ctl, msgs_out) == 384, "tx stats line");
_Static_assert(sizeof(struct ep_ctl) == 448, "control header size");

enum cell_type {
    CELL_INLINE = 1,   /* payload follows the header */
    CELL_FRAG = 2,     /* payload in the sender's fragment `frag` */
    CELL_REGION = 3,   /* payload at region offset `aux` (single copy) */
    CELL_FBOX_REQ = 4, /* sender asks for a fast box */
    CELL_NOP = 5,      /* a cancelled reservation: skipped in order */
    CELL_SHORT = 6,    /* a whole message inline after the short header */
};

struct cell {
    _Atomic uint64_t seq;   /* position + 1 once published (written last) */
    _Atomic uint32_t claim; /* FIFO: CLAIM_WORD of this lap, after the claim */
    uint32_t len;           /* bytes of this piece */
    uint32_t tag;
    uint32_t pseq;   /* per-pair sequence of pieces */
    uint16_t type;
    uint16_t sender; /* sender's directory index */
    uint16_t frag;   /* fragment index (frag_count <= 4096) */
    uint16_t epoch;  /* low 16 bits of the sender endpoint's epoch */
    /* not in a CELL_SHORT cell, whose payload starts here */
    uint64_t offset; /* of this piece in the message */
    uint64_t total;  /* message length */
    uint64_t aux;    /* REGION: region offset of the data; FRAG: lend number */
};
/* 56 bytes: the header of pieces, fragments and region sends */
#define CELL_HDR 56u
_Static_assert(offsetof(struct cell, aux) + 8 == CELL_HDR, "cell header");
/* A whole message (offset 0, total = len) needs no offset, total or aux:
 * its payload starts where they would, so that header, ob1's match header
 * and up to 16 bytes of data share one 64-byte line. */
#define CELL_SHORT_HDR 32u
_Static_assert(offsetof(struct cell, offset) == CELL_SHORT_HDR, "short cell");
_Static_assert(CELL_SHORT_HDR == IVSHM_CELL_OVERHEAD, "public overhead");
#define CELL_EPOCH(e) ((uint16_t)(e))
_Static_assert(offsetof(struct cell, claim) == 8, "claim after seq");

/* A FIFO claim names its lap as well as its claimer, so a claim left by an
 * earlier lap is never taken for this one's (the claimer may die between
 * the head CAS and this store). */
#define CLAIM_WORD(lap, sender)                                              \
    (((uint32_t)(uint16_t)(lap) << 16) | (((uint32_t)(sender) + 1) & 0xffffu))
#define CLAIM_LAP(w) ((uint16_t)((w) >> 16))
#define CLAIM_SENDER(w) (((w)&0xffffu) - 1) /* 0xffffffff: none */

/* Fast-box grant: region offset / 64 and the low 24 bits of the epoch of
 * the sender it was made for, so a later owner of the index never takes
 * it. Offsets below 2^46. */
#define GRANT_OFF_MAX (1ull << 46)
#define GRANT_WORD(epoch, off)                                               \
    (((uint64_t)((epoch)&0xffffffu) << 40) | ((uint64_t)(off) >> 6))
#define GRANT_OFF(w) (((w) & ((1ull << 40) - 1)) << 6)
#define GRANT_EPOCH(w) ((uint32_t)((w) >> 40))

/* Fast box: a single-producer ring of bytes the receiver grants to one
 * sender, fbox_ring_bytes() of the receiver's geometry after this header,
 * then FBOX_SLACK bytes that no entry uses (a reader of an entry's
 * fixed-size header at the ring's end stays inside the box). */
struct fbox_hdr {
    _Atomic uint64_t tail IVSHM_ALIGNED; /* consumer: bytes released up to */
    uint8_t pad[56];
};
_Static_assert(sizeof(struct fbox_hdr) == 64, "fbox header");
#define FBOX_SLACK 64u
/* One cell more than fbox_cells: a lap's skipped end is shorter than an
 * entry, so fbox_cells messages of a whole cell always fit (a window of
 * osu_bw at 1 KiB went to the FIFO in part where the skip took room). */
static inline uint64_t fbox_ring_bytes(uint32_t fbox_cells, uint32_t cell_size)
{
    return fbox_cells ? ((uint64_t)fbox_cells + 1) * cell_size : 0;
}

/* A fast box holds entries packed at 16-byte alignment, so that small
 * messages share lines (an 8-byte MPI message takes 32 bytes, two to a
 * line). Each entry starts with one 64-bit word, stored last (release):
 *   bits  0-15 seq: the low 16 bits of the entry's number in the box + 1
 *                   (a lap holds at most ring/16 <= 16384 entries, so a
 *                   header left from an earlier lap never matches)
 *   bits 16-23 kind (0: nothing yet, the sender zeroes the word after
 *                   each entry it writes while there is room)
 *   bits 24-31 tag (MSG)
 *   bits 32-47 len: MSG: payload bytes; CELL: bytes of the cell inside
 *   bits 48-63 pseq: MSG: the low 16 bits of the pair's sequence
 * An entry takes fbox_entry_size(offset, len) bytes and never wraps: a
 * SKIP entry fills the ring's end instead. */
enum fbox_kind {
    FBOX_MSG = 1,  /* a whole message of up to 255 tag, payload after */
    FBOX_CELL = 2, /* a struct cell (any type) after the word */
    FBOX_SKIP = 3, /* the rest of the ring is unused this lap */
};
#define FBOX_WORD(seq, kind, tag, len, pseq)                                 \
    ((uint64_t)(uint16_t)(seq) | ((uint64_t)(uint8_t)(kind) << 16) |         \
     ((uint64_t)(uint8_t)(tag) << 24) | ((uint64_t)(uint16_t)(len) << 32) |  \
     ((uint64_t)(uint16_t)(pseq) << 48))
#define FBOX_SEQ(w) ((uint16_t)(w))
#define FBOX_KIND(w) ((uint8_t)((w) >> 16))
#define FBOX_TAG(w) ((uint8_t)((w) >> 24))
#define FBOX_LEN(w) ((uint16_t)((w) >> 32))
#define FBOX_PSEQ(w) ((uint16_t)((w) >> 48))
#define FBOX_ALIGN 16u
/* Bytes of an entry of len bytes after its word, written at ring offset
 * off: 16-byte packing within a line; an entry that crosses a line ends
 * on a line's end, so that no later entry shares its last line (a reader
 * of that line would take it from the writer of the next entry: 128-512
 * byte messages were 15-20 % slower packed without this rule). An entry
 * that fits in its line keeps the rest of the line too where the rest is
 * shorter than the entry (layout 6): the next entry of the same size
 * would cross into the next line, and a reader would wait for two lines
 * instead of one (docs/channels.md, "Entries that would cross a line"). */
static inline uint32_t fbox_entry_size(uint32_t off, uint32_t len)
{
    uint32_t raw = (len + 8u + FBOX_ALIGN - 1) & ~(FBOX_ALIGN - 1);
    uint32_t in_line = off & 63u;
    if (in_line + raw <= 64u)
        return 64u - in_line - raw < raw ? 64u - in_line : raw;
    return ((off + raw + 63u) & ~63u) - off;
}

/* Free-running 64-bit positions; full/empty by unsigned difference, which
 * is exact across wrap-around (tests/unit/test_chan.c,
 * test_ring_arithmetic). */
static inline bool ring_full(uint64_t head, uint64_t tail, uint32_t cells)
{
    return head - tail >= cells;
}
static inline uint64_t ring_used(uint64_t head, uint64_t tail)
{
    return head - tail;
}
/* Per-pair sequences are 32-bit and compared by signed difference. */
static inline int32_t seq_diff(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b);
}

#endif
