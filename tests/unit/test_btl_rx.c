/*
 * The BTL's receive gate (mpi-plugin/btl/btl_ivshmem_rx.h) on bad pieces,
 * without Open MPI: a tag out of range, a length over or under the piece,
 * an offset or total that do not make one whole message, a sender outside
 * the peer table. Each is dropped and counted under its reason, never
 * delivered; good pieces are delivered with their sender's endpoint.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../mpi-plugin/btl/btl_ivshmem_rx.h"

#include <string.h>

enum { TAG_MAX = 255, NPEERS = 4 }; /* MCA_BTL_TAG_MAX in Open MPI 4.1 */

struct rx_case {
    const char *what;
    uint32_t sender, tag, len;
    uint64_t offset, total;
    int drop; /* -1: delivered */
};

static const struct rx_case cases[] = {
    {"a good piece", 1, 65, 100, 0, 100, -1},
    {"a good empty piece", 3, 0, 0, 0, 0, -1},
    {"the last tag", 2, TAG_MAX - 1, 8, 0, 8, -1},
    {"a rank not added yet", 0, 65, 8, 0, 8, -1},
    {"a piece over 64 KiB", 1, 65, 65544, 0, 65544, -1},
    {"the first tag out of range", 1, TAG_MAX, 8, 0, 8, IVSHMEM_RX_BAD_TAG},
    {"a tag far out of range", 1, UINT32_MAX, 8, 0, 8, IVSHMEM_RX_BAD_TAG},
    {"a length over the piece", 1, 65, 101, 0, 100, IVSHMEM_RX_BAD_LENGTH},
    {"a length under the total", 1, 65, 99, 0, 100, IVSHMEM_RX_BAD_LENGTH},
    {"a huge length", 1, 65, UINT32_MAX, 0, 8, IVSHMEM_RX_BAD_LENGTH},
    {"a length 64 KiB over the piece", 1, 65, 65636, 0, 100,
     IVSHMEM_RX_BAD_LENGTH},
    {"a later piece", 1, 65, 50, 50, 100, IVSHMEM_RX_BAD_LENGTH},
    {"a bad tag on a later piece (the tag first)", 1, TAG_MAX, 50, 50, 100,
     IVSHMEM_RX_BAD_TAG},
    {"a bad length from an unknown sender (the length first)", NPEERS, 65,
     50, 50, 100, IVSHMEM_RX_BAD_LENGTH},
    {"an offset past the total", 1, 65, 8, 1ull << 40, 8,
     IVSHMEM_RX_BAD_LENGTH},
    {"a total over 4 GiB", 1, 65, 8, 0, (1ull << 32) + 8,
     IVSHMEM_RX_BAD_LENGTH},
    {"the first sender past the table", NPEERS, 65, 8, 0, 8,
     IVSHMEM_RX_UNKNOWN_SENDER},
    {"a sender far past the table", UINT32_MAX, 65, 8, 0, 8,
     IVSHMEM_RX_UNKNOWN_SENDER},
};

/* What mca_btl_ivshmem_recv does with the gate's answer. */
struct rx_sim {
    void *peers[NPEERS];
    uint64_t dropped[IVSHMEM_RX_NDROP];
    unsigned delivered;
    void *delivered_ep;
};

static void receive(struct rx_sim *s, const ivshm_msg_t *m)
{
    void *slot;
    if (!ivshmem_rx_accept(m, TAG_MAX, s->peers, NPEERS, s->dropped, &slot))
        return;
    s->delivered++;
    s->delivered_ep = slot;
}

static void test_each_bad_piece(void **state)
{
    (void)state;
    static int eps[NPEERS];
    static const unsigned char payload[65544];
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const struct rx_case *c = &cases[k];
        struct rx_sim s;
        memset(&s, 0, sizeof(s));
        for (int i = 1; i < NPEERS; i++)
            s.peers[i] = &eps[i]; /* peer 0: not added yet */
        ivshm_msg_t m = {.sender = c->sender,
                         .tag = c->tag,
                         .data = payload,
                         .len = c->len,
                         .offset = c->offset,
                         .total = c->total};
        receive(&s, &m);
        uint64_t drops = 0;
        for (int i = 0; i < IVSHMEM_RX_NDROP; i++)
            drops += s.dropped[i];
        if (c->drop < 0) {
            if (s.delivered != 1 || drops != 0 ||
                s.delivered_ep != s.peers[c->sender])
                fail_msg("%s: delivered %u times, %llu drops", c->what,
                         s.delivered, (unsigned long long)drops);
        } else if (s.delivered != 0 || drops != 1 || s.dropped[c->drop] != 1) {
            fail_msg("%s: delivered %u times, %llu drops (%llu under its "
                     "reason)",
                     c->what, s.delivered, (unsigned long long)drops,
                     (unsigned long long)s.dropped[c->drop]);
        }
    }
}

/* The channel's whole handler passes a whole message's fields: the same
 * cases, where they are whole, get the same verdict from
 * ivshmem_rx_accept_whole. */
static void test_each_bad_whole(void **state)
{
    (void)state;
    static int eps[NPEERS];
    unsigned ran = 0;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const struct rx_case *c = &cases[k];
        if (c->offset != 0 || c->total != c->len)
            continue; /* not a whole message: never passed so */
        ran++;
        void *peers[NPEERS] = {NULL};
        uint64_t dropped[IVSHMEM_RX_NDROP] = {0};
        for (int i = 1; i < NPEERS; i++)
            peers[i] = &eps[i];
        void *slot = NULL;
        bool ok = ivshmem_rx_accept_whole(c->sender, c->tag, TAG_MAX, peers,
                                          NPEERS, dropped, &slot);
        uint64_t drops = 0;
        for (int i = 0; i < IVSHMEM_RX_NDROP; i++)
            drops += dropped[i];
        if (c->drop < 0) {
            if (!ok || drops != 0 || slot != peers[c->sender])
                fail_msg("%s: refused, %llu drops", c->what,
                         (unsigned long long)drops);
        } else if (ok || drops != 1 || dropped[c->drop] != 1) {
            fail_msg("%s: %s, %llu drops (%llu under its reason)", c->what,
                     ok ? "delivered" : "refused", (unsigned long long)drops,
                     (unsigned long long)dropped[c->drop]);
        }
    }
    assert_true(ran >= 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_bad_piece),
        cmocka_unit_test(test_each_bad_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
