/*
 * BTL ivshmem, verbs route: connections to peers on other hosts (RDMA CM
 * events), completions and credit flow control. The device, parameters
 * and start-up are in btl_ivshmem_verbs_device.c.
 *
 * Connections are made on first use, by RDMA CM (the same code on
 * InfiniBand through IPoIB addresses and on RoCE). When both sides ask at
 * once, the request of the lower rank wins: the higher one accepts it and
 * the lower one rejects the other with IVSHMEM_VERBS_COLLISION.
 *
 * Flow control: each side posts rq_depth receive buffers per connection.
 * A sender holds one credit per free buffer of its peer and spends one per
 * message; every message returns the buffers its sender has reposted. The
 * last credit is kept for an explicit credit message, so two peers that
 * only send can never stall each other. Both sides post their receives
 * before the connection is made (the requester before rdma_connect, the
 * acceptor before rdma_accept), so a correct exchange never meets a
 * receiver that is not ready, and none is retried by default
 * (btl_ivshmem_verbs_rnr_retry 0): a flow-control bug ends the job with an
 * error at its first overrun instead of crawling, one retry timer a
 * message.
 *
 * Failures in the middle of a job (a peer that cannot be connected, a
 * queue pair in error, a connection lost with transfers under way) end the
 * job through ob1's error callback, with a message naming the peer and the
 * cause. Every wait is bounded by btl_ivshmem_verbs_connect_timeout.
 */
#include "btl_ivshmem_verbs.h"

#include "opal/util/output.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- connections ---- */

/* an id and its queue pair, if it has one */
static void destroy_id(struct rdma_cm_id *id)
{
    if (id->qp) {
        rdma_destroy_qp(id);
        IVSHMEM_VERBS->qps--;
    }
    rdma_destroy_id(id);
}

static void conn_release_qp(ivshmem_verbs_conn_t *vc)
{
    if (vc->id) {
        destroy_id(vc->id);
        vc->id = NULL;
    }
    if (vc->out_id) {
        destroy_id(vc->out_id);
        vc->out_id = NULL;
    }
}

void ivshmem_verbs_conn_free(ivshmem_verbs_conn_t *vc)
{
    if (!vc)
        return;
    if (vc->state == VC_CONNECTING || vc->state == VC_ACCEPTING)
        IVSHMEM_VERBS->connecting--;
    conn_release_qp(vc);
    if (vc->rmr)
        ibv_dereg_mr(vc->rmr);
    free(vc->rbuf);
    free(vc->rslots);
    opal_list_item_t *it;
    while ((it = opal_list_remove_first(&vc->pending)) != NULL)
        ivshmem_verbs_send_done((ivshmem_verbs_frag_t *)it, OPAL_ERR_UNREACH);
    OBJ_DESTRUCT(&vc->pending);
    free(vc);
}

ivshmem_verbs_conn_t *ivshmem_verbs_conn_new(struct mca_btl_base_endpoint_t *ep,
                                             const ivshmem_verbs_addr_t *addr)
{
    ivshmem_verbs_conn_t *vc = calloc(1, sizeof(*vc));
    if (!vc)
        return NULL;
    vc->ep = ep;
    vc->addr = *addr;
    vc->state = VC_IDLE;
    OBJ_CONSTRUCT(&vc->pending, opal_list_t);
    return vc;
}

void ivshmem_verbs_fatal(struct mca_btl_base_endpoint_t *ep, const char *what)
{
    if (IVSHMEM_VERBS->failed)
        return;
    IVSHMEM_VERBS->failed = true;
    char host[256] = "?";
    gethostname(host, sizeof(host));
    opal_output(0, "btl ivshmem: verbs route from rank %u on %s to rank %u "
                   "failed: %s; the job cannot continue",
                (unsigned)OPAL_PROC_MY_NAME.vpid, host,
                ep ? ep->vpid : UINT32_MAX, what);
    if (IVSHMEM_VERBS->error_cb)
        IVSHMEM_VERBS->error_cb(&mca_btl_ivshmem_verbs_module,
                                MCA_BTL_ERROR_FLAGS_FATAL, ep ? ep->proc : NULL,
                                "btl ivshmem: verbs route failed");
    else
        abort();
}

static void conn_fail(ivshmem_verbs_conn_t *vc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void conn_fail(ivshmem_verbs_conn_t *vc, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (vc->state == VC_CONNECTING || vc->state == VC_ACCEPTING)
        IVSHMEM_VERBS->connecting--;
    vc->state = VC_CLOSED;
    ivshmem_verbs_fatal(vc->ep, msg);
}

static int post_recv(ivshmem_verbs_conn_t *vc, struct ibv_qp *qp,
                     uint32_t idx)
{
    struct ibv_sge sge = {
        .addr =
            (uintptr_t)(vc->rbuf + (size_t)idx * IVSHMEM_VERBS->self.buf_size),
        .length = IVSHMEM_VERBS->self.buf_size,
        .lkey = vc->rmr->lkey,
    };
    struct ibv_recv_wr wr = {.wr_id = (uintptr_t)&vc->rslots[idx].wr,
                             .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(qp, &wr, &bad);
}

/* Every buffer of the connection, on the queue pair of one of its ids.
 * A request that loses to the peer's is destroyed with its buffers
 * posted: their flushed receives are left alone (ivshmem_verbs_poll), and
 * the same buffers go to the queue pair that wins. */
static int post_all_recvs(ivshmem_verbs_conn_t *vc, struct ibv_qp *qp)
{
    for (uint32_t i = 0; i < IVSHMEM_VERBS->rq_depth; i++)
        if (post_recv(vc, qp, i) != 0)
            return -1;
    return 0;
}

/* A queue pair on id, and this connection's receive buffers. Every
 * connection's work requests complete into the one CQ: it grows with the
 * number of queue pairs. */
static int make_qp(ivshmem_verbs_conn_t *vc, struct rdma_cm_id *id)
{
    int need = (int)(IVSHMEM_VERBS->qps + 1) *
               (int)(IVSHMEM_VERBS->sq_depth + IVSHMEM_VERBS->rq_depth);
    if (need > IVSHMEM_VERBS->cq_size) {
        int want = need * 2;
        if (ibv_resize_cq(IVSHMEM_VERBS->cq, want) != 0)
            return -1;
        IVSHMEM_VERBS->cq_size = want;
    }
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = IVSHMEM_VERBS->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 1;
    qa.cap.max_send_wr = IVSHMEM_VERBS->sq_depth;
    qa.cap.max_recv_wr = IVSHMEM_VERBS->rq_depth;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = 64;
    if (rdma_create_qp(id, IVSHMEM_VERBS->pd, &qa) != 0) {
        qa.cap.max_inline_data = 0;
        if (rdma_create_qp(id, IVSHMEM_VERBS->pd, &qa) != 0)
            return -1;
    }
    IVSHMEM_VERBS->qps++;
    vc->max_inline = qa.cap.max_inline_data;
    if (!vc->rbuf) {
        size_t bytes =
            (size_t)IVSHMEM_VERBS->rq_depth * IVSHMEM_VERBS->self.buf_size;
        if (posix_memalign((void **)&vc->rbuf, 4096, bytes) != 0) {
            vc->rbuf = NULL;
            return -1;
        }
        vc->rslots = calloc(IVSHMEM_VERBS->rq_depth, sizeof(*vc->rslots));
        vc->rmr = ibv_reg_mr(IVSHMEM_VERBS->pd, vc->rbuf, bytes,
                             IBV_ACCESS_LOCAL_WRITE);
        if (!vc->rslots || !vc->rmr)
            return -1;
        for (uint32_t i = 0; i < IVSHMEM_VERBS->rq_depth; i++) {
            vc->rslots[i].wr.kind = VWR_RECV;
            vc->rslots[i].conn = vc;
            vc->rslots[i].idx = i;
        }
    }
    return 0;
}

static void conn_params(struct rdma_conn_param *cp, ivshmem_verbs_conn_data_t *d)
{
    memset(d, 0, sizeof(*d));
    d->magic = IVSHMEM_VERBS_CONN_MAGIC;
    d->jobid = (uint32_t)OPAL_PROC_MY_NAME.jobid;
    d->vpid = (uint32_t)OPAL_PROC_MY_NAME.vpid;
    d->rq_depth = (uint16_t)IVSHMEM_VERBS->rq_depth;
    memset(cp, 0, sizeof(*cp));
    cp->private_data = d;
    cp->private_data_len = sizeof(*d);
    cp->responder_resources = 1;
    cp->initiator_depth = 1;
    cp->retry_count = (uint8_t)(IVSHMEM_VERBS->retry_count & 7);
    cp->rnr_retry_count = (uint8_t)(IVSHMEM_VERBS->rnr_retry & 7);
}

static void start_connect(ivshmem_verbs_conn_t *vc)
{
    vc->state = VC_CONNECTING;
    vc->started_ns = now_ns();
    IVSHMEM_VERBS->connecting++;
    if (rdma_create_id(IVSHMEM_VERBS->ech, &vc->out_id, vc, RDMA_PS_TCP) != 0) {
        vc->out_id = NULL;
        conn_fail(vc, "rdma_create_id: %s", strerror(errno));
        return;
    }
    struct sockaddr_in src, dst;
    memset(&src, 0, sizeof(src));
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = IVSHMEM_VERBS->self.ipv4;
    memset(&dst, 0, sizeof(dst));
    dst.sin_family = AF_INET;
    dst.sin_addr.s_addr = vc->addr.ipv4;
    dst.sin_port = vc->addr.port;
    if (rdma_resolve_addr(vc->out_id, (struct sockaddr *)&src,
                          (struct sockaddr *)&dst,
                          IVSHMEM_VERBS->resolve_timeout_ms) != 0)
        conn_fail(vc, "rdma_resolve_addr: %s", strerror(errno));
}

static bool can_send(const ivshmem_verbs_conn_t *vc)
{
    return vc->state == VC_CONNECTED && ivshmem_credit_data_ok(vc->credits) &&
           vc->sq_used < IVSHMEM_VERBS->sq_depth;
}

static int do_post(ivshmem_verbs_conn_t *vc, ivshmem_verbs_frag_t *f)
{
    uint16_t give = ivshmem_credit_give(vc->owed);
    f->hdr->credits = give;
    uint32_t len = (uint32_t)sizeof(*f->hdr) + f->hdr->len;
    struct ibv_sge sge = {.addr = (uintptr_t)f->hdr, .length = len,
                          .lkey = f->lkey};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = (uintptr_t)&f->wr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | (len <= vc->max_inline ? IBV_SEND_INLINE : 0);
    int err = ibv_post_send(vc->id->qp, &wr, &bad);
    if (err != 0) {
        conn_fail(vc, "ibv_post_send: %s", strerror(err));
        return OPAL_ERROR;
    }
    ivshmem_credit_spent(&vc->credits, &vc->owed, give);
    vc->sq_used++;
    return OPAL_SUCCESS;
}

/* An explicit credit message, when enough buffers were reposted and no
 * data message can carry them now (btl_ivshmem_credit.h). It may spend the
 * last credit. */
static void maybe_send_credits(ivshmem_verbs_conn_t *vc)
{
    if (vc->state != VC_CONNECTED ||
        !ivshmem_credit_msg_due(vc->credits, vc->owed, IVSHMEM_VERBS->rq_depth,
                                !opal_list_is_empty(&vc->pending)) ||
        vc->sq_used >= IVSHMEM_VERBS->sq_depth)
        return;
    ivshmem_verbs_frag_t *f =
        (ivshmem_verbs_frag_t *)opal_free_list_get(&IVSHMEM_VERBS->frags);
    if (!f)
        return;
    f->hdr = (ivshmem_verbs_hdr_t *)f->base.super.ptr;
    f->lkey = (uint32_t)ivshmem_verbs_frag_lkey(f);
    f->ep = vc->ep;
    f->wr.kind = VWR_SEND;
    f->base.des_flags = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    f->hdr->tag = 0;
    f->hdr->type = IVSHMEM_VERBS_CREDIT;
    f->hdr->len = 0;
    if (do_post(vc, f) != OPAL_SUCCESS)
        opal_free_list_return(&IVSHMEM_VERBS->frags, &f->base.super);
}

static int flush_pending(ivshmem_verbs_conn_t *vc)
{
    int n = 0;
    opal_list_item_t *it;
    while (can_send(vc) && (it = opal_list_remove_first(&vc->pending)) != NULL) {
        if (do_post(vc, (ivshmem_verbs_frag_t *)it) != OPAL_SUCCESS) {
            ivshmem_verbs_send_done((ivshmem_verbs_frag_t *)it, OPAL_ERR_UNREACH);
            return n;
        }
        n++;
    }
    maybe_send_credits(vc);
    return n;
}

int ivshmem_verbs_post_send(ivshmem_verbs_conn_t *vc, ivshmem_verbs_frag_t *f)
{
    if (vc->state == VC_CLOSED) {
        ivshmem_verbs_fatal(vc->ep, "a send on a closed connection (the "
                                    "peer ended or failed)");
        return OPAL_ERR_UNREACH;
    }
    if (!can_send(vc) || !opal_list_is_empty(&vc->pending)) {
        if (vc->state == VC_IDLE)
            start_connect(vc);
        if (vc->state == VC_CONNECTED && !ivshmem_credit_data_ok(vc->credits) &&
            opal_list_is_empty(&vc->pending))
            vc->ep->credit_waits++; /* a wait for credits begins */
        opal_list_append(&vc->pending, &f->base.super.super);
        return OPAL_SUCCESS;
    }
    return do_post(vc, f);
}

/* ---- RDMA CM events ---- */

/* The peer accepted our request: its id is the connection's, with the
 * credits of the peer's buffers. */
static void request_won(ivshmem_verbs_conn_t *vc)
{
    vc->id = vc->out_id;
    vc->out_id = NULL;
    vc->credits = vc->addr.rq_depth;
}

static void conn_up(ivshmem_verbs_conn_t *vc)
{
    if (vc->state == VC_CONNECTING || vc->state == VC_ACCEPTING)
        IVSHMEM_VERBS->connecting--;
    if (vc->state != VC_CONNECTED)
        opal_output_verbose(2, IVSHMEM_COMPONENT->output,
                            "btl ivshmem: verbs: rank %u "
                            "connected",
                            vc->ep->vpid);
    vc->state = VC_CONNECTED;
}

static const char *ip_str(uint32_t ip, char *buf)
{
    inet_ntop(AF_INET, &ip, buf, INET_ADDRSTRLEN);
    return buf;
}

static void on_connect_request(struct rdma_cm_id *id,
                               const ivshmem_verbs_conn_data_t *d, size_t len)
{
    ivshmem_verbs_conn_t *vc = NULL;
    uint32_t me = (uint32_t)OPAL_PROC_MY_NAME.vpid;
    const char *why = "not from a rank of this job";
    if (len >= sizeof(*d) && d->magic == IVSHMEM_VERBS_CONN_MAGIC &&
        d->jobid == (uint32_t)OPAL_PROC_MY_NAME.jobid &&
        d->vpid < IVSHMEM_VERBS->nconns && d->vpid != me && d->rq_depth >= 2)
        vc = ivshmem_verbs_conn_for(d->vpid, &why);
    if (vc && (vc->state == VC_CONNECTED || vc->state == VC_ACCEPTING ||
               vc->state == VC_CLOSED))
        why = "already connected";
    if (!vc || vc->state == VC_CONNECTED || vc->state == VC_ACCEPTING ||
        vc->state == VC_CLOSED) {
        opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                            "btl ivshmem: verbs: refused a connection request "
                            "(%s)",
                            why);
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return;
    }
    if (vc->state == VC_CONNECTING && vc->out_id && me < d->vpid) {
        /* both asked: ours wins, the peer accepts it */
        uint32_t col = IVSHMEM_VERBS_COLLISION;
        rdma_reject(id, &col, sizeof(col));
        rdma_destroy_id(id);
        return;
    }
    if (vc->state == VC_CONNECTING && vc->out_id) {
        /* both asked: the peer's wins; ours is dropped (the peer rejects
         * it) */
        destroy_id(vc->out_id);
        vc->out_id = NULL;
    }
    if (vc->state == VC_IDLE) {
        IVSHMEM_VERBS->connecting++;
        vc->started_ns = now_ns();
    }
    vc->state = VC_ACCEPTING;
    id->context = vc;
    vc->id = id;
    vc->credits = d->rq_depth < vc->addr.rq_depth ? d->rq_depth : vc->addr.rq_depth;
    if (make_qp(vc, id) != 0 || post_all_recvs(vc, id->qp) != 0) {
        conn_fail(vc, "cannot create a queue pair: %s", strerror(errno));
        return;
    }
    struct rdma_conn_param cp;
    ivshmem_verbs_conn_data_t mine;
    conn_params(&cp, &mine);
    if (rdma_accept(id, &cp) != 0)
        conn_fail(vc, "rdma_accept: %s", strerror(errno));
}

static void on_event(struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    ivshmem_verbs_conn_t *vc = (ivshmem_verbs_conn_t *)id->context;
    char ipb[INET_ADDRSTRLEN];
    int status = ev->status;
    enum rdma_cm_event_type type = ev->event;
    ivshmem_verbs_conn_data_t d;
    size_t dlen = 0;
    memset(&d, 0, sizeof(d));
    if ((type == RDMA_CM_EVENT_CONNECT_REQUEST ||
         type == RDMA_CM_EVENT_REJECTED) &&
        ev->param.conn.private_data) {
        dlen = ev->param.conn.private_data_len < sizeof(d)
                   ? ev->param.conn.private_data_len
                   : sizeof(d);
        memcpy(&d, ev->param.conn.private_data, dlen);
    }
    rdma_ack_cm_event(ev);

    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        on_connect_request(id, &d, dlen);
        return;
    }
    if (!vc || (id != vc->id && id != vc->out_id)) {
        if (type == RDMA_CM_EVENT_DEVICE_REMOVAL)
            ivshmem_verbs_fatal(NULL, "the RDMA device was removed");
        return; /* an id already released */
    }
    const char *peer = ip_str(vc->addr.ipv4, ipb);
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: {
        uint8_t t = (uint8_t)IVSHMEM_VERBS->ack_timeout;
        (void)rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
                              &t, sizeof(t));
        if (rdma_resolve_route(id, IVSHMEM_VERBS->resolve_timeout_ms) != 0)
            conn_fail(vc, "rdma_resolve_route to %s: %s", peer, strerror(errno));
        break;
    }
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        /* the receives go first: the acceptor may send as soon as it
         * sees the connection, before our ESTABLISHED event */
        if (make_qp(vc, id) != 0 || post_all_recvs(vc, id->qp) != 0) {
            conn_fail(vc, "cannot create a queue pair: %s", strerror(errno));
            break;
        }
        struct rdma_conn_param cp;
        ivshmem_verbs_conn_data_t mine;
        conn_params(&cp, &mine);
        if (rdma_connect(id, &cp) != 0)
            conn_fail(vc, "rdma_connect to %s: %s", peer, strerror(errno));
        break;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
        if (id == vc->out_id)
            request_won(vc);
        conn_up(vc);
        flush_pending(vc);
        break;
    case RDMA_CM_EVENT_REJECTED:
        if (id == vc->out_id && dlen >= sizeof(uint32_t) &&
            d.magic == IVSHMEM_VERBS_COLLISION) {
            /* the peer's own request wins: wait for it */
            destroy_id(id);
            vc->out_id = NULL;
            break;
        }
        conn_fail(vc, "rank %u at %s:%u refused the connection (%s, status "
                      "%d)", vc->ep->vpid, peer, ntohs(vc->addr.port),
                  rdma_event_str(type), status);
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        conn_fail(vc, "cannot reach rank %u at %s:%u: %s (status %d)",
                  vc->ep->vpid, peer, ntohs(vc->addr.port),
                  rdma_event_str(type), status);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (id != vc->id)
            break;
        if (vc->sq_used || !opal_list_is_empty(&vc->pending)) {
            conn_fail(vc, "rank %u at %s closed the connection with %u "
                          "transfers under way (the process ended?)",
                      vc->ep->vpid, peer,
                      vc->sq_used + (uint32_t)opal_list_get_size(&vc->pending));
        } else {
            opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                                "btl ivshmem: verbs: rank %u "
                                "closed its connection",
                                vc->ep->vpid);
            vc->state = VC_CLOSED;
        }
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        conn_fail(vc, "the RDMA device was removed");
        break;
    default:
        break;
    }
}

static int cm_progress(void)
{
    int n = 0;
    struct rdma_cm_event *ev;
    while (IVSHMEM_VERBS->ech &&
           rdma_get_cm_event(IVSHMEM_VERBS->ech, &ev) == 0) {
        on_event(ev);
        n++;
    }
    if (IVSHMEM_VERBS->connecting) {
        uint64_t t = now_ns(),
                 limit =
                     (uint64_t)IVSHMEM_VERBS->connect_timeout_s * 1000000000ull;
        char ipb[INET_ADDRSTRLEN];
        for (uint32_t i = 0; i < IVSHMEM_VERBS->nconns; i++) {
            ivshmem_verbs_conn_t *vc = IVSHMEM_VERBS->conns[i];
            if (vc && (vc->state == VC_CONNECTING || vc->state == VC_ACCEPTING) &&
                t - vc->started_ns > limit)
                conn_fail(vc,
                          "no connection to rank %u at %s:%u after %d s "
                          "(btl_ivshmem_verbs_connect_timeout)",
                          vc->ep->vpid, ip_str(vc->addr.ipv4, ipb),
                          ntohs(vc->addr.port),
                          IVSHMEM_VERBS->connect_timeout_s);
        }
    }
    return n;
}

/* ---- completions ---- */

static void on_recv(ivshmem_verbs_rslot_t *s, uint32_t byte_len,
                    uint32_t qp_num)
{
    ivshmem_verbs_conn_t *vc = s->conn;
    /* the acceptor's first message can overtake its own ESTABLISHED
     * event: its arrival proves the connection is up. The requester's
     * cannot (librdmacm readies our queue pair in the same
     * rdma_get_cm_event call that reports ESTABLISHED, which cm_progress
     * handles before the CQ is polled); the first branch only keeps that
     * order from mattering: a message on our request's queue pair means
     * the peer accepted it */
    if (vc->state == VC_CONNECTING && vc->out_id && vc->out_id->qp &&
        vc->out_id->qp->qp_num == qp_num) {
        request_won(vc);
        conn_up(vc);
    } else if (vc->state == VC_ACCEPTING)
        conn_up(vc);
    if (vc->state != VC_CONNECTED)
        return;
    const ivshmem_verbs_hdr_t *h =
        (const ivshmem_verbs_hdr_t *)(vc->rbuf +
                                      (size_t)s->idx *
                                          IVSHMEM_VERBS->self.buf_size);
    ivshmem_verbs_hdr_t hd;
    if (byte_len < sizeof(hd)) {
        conn_fail(vc, "a message of %u bytes (shorter than its header)", byte_len);
        return;
    }
    memcpy(&hd, h, sizeof(hd));
    /* credits cannot exceed the buffers the peer has */
    ivshmem_credit_take(&vc->credits, hd.credits, vc->addr.rq_depth);
    if (hd.type == IVSHMEM_VERBS_DATA) {
        if (hd.len != byte_len - sizeof(hd)) {
            conn_fail(vc, "a message whose length (%u) is not what arrived (%u)",
                      hd.len, (unsigned)(byte_len - sizeof(hd)));
            return;
        }
        ivshmem_verbs_deliver(vc, &hd, (void *)(h + 1));
    }
    if (vc->state != VC_CONNECTED)
        return;
    if (post_recv(vc, vc->id->qp, s->idx) != 0) {
        conn_fail(vc, "ibv_post_recv: %s", strerror(errno));
        return;
    }
    vc->owed++;
    flush_pending(vc);
}

int ivshmem_verbs_poll(void)
{
    int n = 0;
    if (IVSHMEM_VERBS->connecting ||
        (++IVSHMEM_VERBS->progress_calls & 127) == 0)
        n += cm_progress();
    if (IVSHMEM_VERBS->qps == 0)
        return n; /* nothing can complete: no CQ poll on the region's path */
    struct ibv_wc wc[16];
    int k = ibv_poll_cq(IVSHMEM_VERBS->cq, 16, wc);
    for (int i = 0; i < k; i++) {
        ivshmem_verbs_wr_t *w = (ivshmem_verbs_wr_t *)(uintptr_t)wc[i].wr_id;
        if (w->kind == VWR_RECV) {
            ivshmem_verbs_rslot_t *s = (ivshmem_verbs_rslot_t *)w;
            /* a flushed receive carries nothing: its queue pair was
             * destroyed (a request that lost to the peer's, a closed
             * connection) or went to error. Where the error is ours
             * alone (a fatal asynchronous event, the peer's bad RDMA
             * write), nothing here says so, but the peer's sends then go
             * unacknowledged and end the job on its side */
            if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
                continue;
            if (wc[i].status == IBV_WC_SUCCESS)
                on_recv(s, wc[i].byte_len, wc[i].qp_num);
            else if (s->conn->state != VC_CLOSED)
                conn_fail(s->conn, "a receive failed: %s",
                          ibv_wc_status_str(wc[i].status));
            continue;
        }
        ivshmem_verbs_frag_t *f =
            (ivshmem_verbs_frag_t *)((char *)w - offsetof(ivshmem_verbs_frag_t, wr));
        ivshmem_verbs_conn_t *vc = f->ep->vc;
        if (vc->sq_used)
            vc->sq_used--;
        int st = OPAL_SUCCESS;
        if (wc[i].status != IBV_WC_SUCCESS) {
            st = OPAL_ERR_UNREACH;
            if (vc->state != VC_CLOSED)
                conn_fail(vc, "a %s failed: %s",
                          w->kind == VWR_RDMA ? "RDMA transfer" : "send",
                          ibv_wc_status_str(wc[i].status));
        }
        if (w->kind == VWR_RDMA)
            ivshmem_verbs_rdma_done(f, st);
        else
            ivshmem_verbs_send_done(f, st);
        if (vc->state == VC_CONNECTED)
            flush_pending(vc);
        n++;
    }
    if (k < 0)
        ivshmem_verbs_fatal(NULL, "ibv_poll_cq failed");
    return n + k;
}
