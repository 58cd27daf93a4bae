/*
 * Two UCP processes that exchange tagged messages through an endpoint with
 * error handling mode peer, until one of them dies: the survivor must hear
 * of it through the endpoint's error callback (never hang, never a wrong
 * result). Addresses are exchanged through files.
 *
 *   ucp_peer_fail MY_ADDR_FILE PEER_ADDR_FILE SECONDS
 *
 * Prints "ucp_peer_fail: running" once a message from the peer arrived,
 * "ucp_peer_fail: error callback: STATUS" and exits 0 when the callback
 * comes; exits 2 if it did not come within SECONDS, 3 if a message came
 * out of order or wrong, 1 on a set-up error.
 */
#include <ucp/api/ucp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile int peer_failed;
static ucs_status_t peer_status;

static void on_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    peer_status = status;
    peer_failed = 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *read_file(const char *path, size_t *len, double deadline)
{
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            static char buf[4096];
            *len = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            if (*len > 0)
                return buf;
        }
        if (now() > deadline)
            return NULL;
        usleep(10000);
    }
}

static void done_cb(void *req, ucs_status_t st, void *arg)
{
    (void)req;
    (void)st;
    (void)arg;
}

static void recv_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *i,
                    void *arg)
{
    (void)req;
    (void)st;
    (void)i;
    (void)arg;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s MY_ADDR_FILE PEER_ADDR_FILE SECONDS\n",
                argv[0]);
        return 1;
    }
    double deadline = now() + atof(argv[3]);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (ucp_init(&params, NULL, &ctx) != UCS_OK ||
        ucp_worker_create(ctx, &wp, &worker) != UCS_OK) {
        fprintf(stderr, "ucp_peer_fail: cannot open UCP\n");
        return 1;
    }
    ucp_address_t *addr;
    size_t addr_len;
    if (ucp_worker_get_address(worker, &addr, &addr_len) != UCS_OK)
        return 1;
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(addr, 1, addr_len, f) != addr_len || fclose(f) != 0 ||
        rename(tmp, argv[1]) != 0) {
        perror("ucp_peer_fail: address file");
        return 1;
    }
    size_t peer_len;
    void *peer = read_file(argv[2], &peer_len, deadline);
    if (!peer) {
        fprintf(stderr, "ucp_peer_fail: no peer address\n");
        return 1;
    }
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = peer,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = on_error, .arg = NULL},
    };
    ucp_ep_h ep;
    ucs_status_t st = ucp_ep_create(worker, &ep_params, &ep);
    if (st != UCS_OK) {
        fprintf(stderr, "ucp_peer_fail: ucp_ep_create: %s\n",
                ucs_status_string(st));
        return 1;
    }
    uint64_t out = 0, in = 0, expect = 1;
    void *sreq = NULL, *rreq = NULL;
    int running = 0;
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                              .cb.send = done_cb};
    /* a request even when the message is there already (else NULL, and
     * the message would go unchecked) */
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                              .cb.recv = recv_cb};
    while (!peer_failed && now() < deadline) {
        if (sreq == NULL || ucp_request_check_status(sreq) != UCS_INPROGRESS) {
            if (sreq && UCS_PTR_IS_PTR(sreq))
                ucp_request_free(sreq);
            out++;
            sreq = ucp_tag_send_nbx(ep, &out, sizeof(out), 1, &sp);
            if (UCS_PTR_IS_ERR(sreq))
                sreq = NULL; /* the error callback says why */
        }
        if (rreq == NULL || ucp_request_check_status(rreq) != UCS_INPROGRESS) {
            if (rreq) {
                if (ucp_request_check_status(rreq) == UCS_OK) {
                    /* the peer sends 1, 2, 3, ... on one endpoint, in
                     * order: anything else is a wrong result */
                    if (in != expect) {
                        printf("ucp_peer_fail: wrong message: %llu where "
                               "%llu was due\n", (unsigned long long)in,
                               (unsigned long long)expect);
                        return 3;
                    }
                    expect++;
                    if (!running) {
                        running = 1;
                        printf("ucp_peer_fail: running\n");
                        fflush(stdout);
                    }
                }
                ucp_request_free(rreq);
            }
            rreq = ucp_tag_recv_nbx(worker, &in, sizeof(in), 1, ~0ull, &rp);
            if (UCS_PTR_IS_ERR(rreq))
                rreq = NULL;
        }
        ucp_worker_progress(worker);
        usleep(100); /* two cores are shared by every test */
    }
    if (!peer_failed) {
        printf("ucp_peer_fail: no error callback within %s s (sent %llu)\n",
               argv[3], (unsigned long long)out);
        return 2;
    }
    printf("ucp_peer_fail: error callback: %s\n",
           ucs_status_string(peer_status));
    fflush(stdout);
    _exit(0); /* the endpoint failed: no orderly close to wait for */
}
