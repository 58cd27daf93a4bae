/*
 * Two UCP processes exchange tagged messages of sizes around every protocol
 * boundary of UCX and of the ivshmem transport, each checked byte by byte
 * on both sides: the client sends a pattern, the server checks it and
 * answers with another pattern of the same size, which the client checks.
 * No MPI and no shared file: the worker addresses go over one TCP socket,
 * so the two may run in containers that share nothing else (the transport
 * UCX picks is UCX's choice, UCX_TLS as the environment leaves it).
 *
 *   ucp_check server PORT
 *   ucp_check client HOST PORT
 *
 * Each side prints "ucp_check ROLE: N sizes, P passed, F failed, B bytes
 * sent" (B: its payload) and exits 0 only when every size passed.
 * With UCP_CHECK_GATE=FILE each side, its worker up and the addresses
 * exchanged, waits (at most 30 s) for FILE before it creates its endpoint:
 * a test can change what the region holds of both workers in between.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

/* 1048: the transport's short messages (a 1088-byte cell; UCP's eager
 * short carries 8 bytes of tag before the payload, hence 1040); 96: the
 * same with IVSHM_CELL_SIZE=128; 8 KiB: UCP's eager bcopy fragments;
 * 32 KiB: the transport's largest message; then UCP's multi-fragment
 * eager and rendezvous sizes */
static const size_t sizes[] = {
    0,     1,     8,     63,    64,    88,    95,    96,    97,
    128,   1024,  1039,  1040,  1041,  1047,  1048,  1049,  4095,
    4096,  4097,  8191,  8192,  8193,  16384, 32767, 32768, 32769,
    65535, 65536, 65537, 262147, 1 << 20, (4 << 20) + 3};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define MAX_SIZE ((4 << 20) + 3)

static unsigned char pattern(int from_server, size_t k, size_t i)
{
    return (unsigned char)(i * 13 + k * 7 + (from_server ? 101 : 0) + (i >> 8));
}

static void die(const char *what, ucs_status_t st)
{
    fprintf(stderr, "ucp_check: %s: %s\n", what, ucs_status_string(st));
    exit(2);
}

static int full_io(int fd, void *buf, size_t len, int out)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* the server listens and accepts one client; the client connects */
static int oob_connect(const char *host, const char *port)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                             .ai_flags = host ? 0 : AI_PASSIVE};
    struct addrinfo *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return -1;
    int fd = socket(ai->ai_family, ai->ai_socktype, 0), conn = -1;
    if (fd >= 0 && host) {
        /* the server may still be starting: a few tries */
        for (int tries = 0; tries < 100 && conn < 0; tries++) {
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
                conn = fd;
            else
                usleep(100 * 1000);
        }
    } else if (fd >= 0) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1) == 0)
            conn = accept(fd, NULL, NULL);
        close(fd);
    }
    freeaddrinfo(ai);
    if (conn < 0 && fd >= 0 && host)
        close(fd);
    return conn;
}

static void wait_req(ucp_worker_h worker, void *req, const char *what)
{
    if (req == NULL)
        return;
    if (UCS_PTR_IS_ERR(req))
        die(what, UCS_PTR_STATUS(req));
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS)
        ucp_worker_progress(worker);
    ucp_request_free(req);
    if (st != UCS_OK)
        die(what, st);
}

static void send_msg(ucp_worker_h w, ucp_ep_h ep, const void *buf, size_t n,
                     ucp_tag_t tag)
{
    ucp_request_param_t prm = {.op_attr_mask = 0};
    wait_req(w, ucp_tag_send_nbx(ep, buf, n, tag, &prm), "send");
}

/* receives one message of tag into buf; returns its length (the request
 * says it when the receive did not complete at once) */
static size_t recv_msg(ucp_worker_h w, void *buf, size_t cap, ucp_tag_t tag)
{
    ucp_tag_recv_info_t info = {0};
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO,
                               .recv_info.tag_info = &info};
    void *req = ucp_tag_recv_nbx(w, buf, cap, tag, (ucp_tag_t)-1, &prm);
    if (req == NULL)
        return info.length;
    if (UCS_PTR_IS_ERR(req))
        die("receive", UCS_PTR_STATUS(req));
    ucs_status_t st;
    while ((st = ucp_tag_recv_request_test(req, &info)) == UCS_INPROGRESS)
        ucp_worker_progress(w);
    ucp_request_free(req);
    if (st != UCS_OK)
        die("receive", st);
    return info.length;
}

static int intact(const unsigned char *buf, size_t n, size_t got,
                  int from_server, size_t k)
{
    if (got != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (buf[i] != pattern(from_server, k, i))
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    int server = argc == 3 && strcmp(argv[1], "server") == 0;
    if (!server && !(argc == 4 && strcmp(argv[1], "client") == 0)) {
        fprintf(stderr, "usage: ucp_check server PORT | client HOST PORT\n");
        return 2;
    }
    const char *role = server ? "server" : "client";
    int sock = oob_connect(server ? NULL : argv[2], argv[argc - 1]);
    if (sock < 0) {
        fprintf(stderr, "ucp_check %s: no connection on port %s\n", role,
                argv[argc - 1]);
        return 2;
    }

    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    ucs_status_t st = ucp_init(&params, NULL, &ctx);
    if (st != UCS_OK)
        die("ucp_init", st);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_worker_h worker;
    if ((st = ucp_worker_create(ctx, &wp, &worker)) != UCS_OK)
        die("ucp_worker_create", st);
    ucp_address_t *addr;
    size_t addr_len;
    if ((st = ucp_worker_get_address(worker, &addr, &addr_len)) != UCS_OK)
        die("ucp_worker_get_address", st);

    /* each side sends its length and address, then reads the peer's */
    uint64_t len = addr_len, peer_len;
    if (full_io(sock, &len, sizeof(len), 1) || full_io(sock, addr, addr_len, 1) ||
        full_io(sock, &peer_len, sizeof(peer_len), 0) || peer_len > 65536) {
        fprintf(stderr, "ucp_check %s: address exchange failed\n", role);
        return 2;
    }
    void *peer = malloc(peer_len);
    if (full_io(sock, peer, peer_len, 0)) {
        fprintf(stderr, "ucp_check %s: address exchange failed\n", role);
        return 2;
    }
    const char *gate = getenv("UCP_CHECK_GATE");
    struct stat sb;
    for (int i = 0; gate && stat(gate, &sb) != 0; i++) {
        if (i == 3000) {
            fprintf(stderr, "ucp_check %s: %s did not appear\n", role, gate);
            return 2;
        }
        usleep(10000);
    }
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                 .address = peer};
    ucp_ep_h ep;
    if ((st = ucp_ep_create(worker, &ep_params, &ep)) != UCS_OK)
        die("ucp_ep_create", st);

    unsigned char *out = malloc(MAX_SIZE), *in = malloc(MAX_SIZE);
    int passed = 0, failed = 0;
    size_t bytes_sent = 0;
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k], got;
        bytes_sent += n;
        for (size_t i = 0; i < n; i++)
            out[i] = pattern(server, k, i);
        if (server) {
            got = recv_msg(worker, in, MAX_SIZE, k);
            send_msg(worker, ep, out, n, k);
        } else {
            send_msg(worker, ep, out, n, k);
            got = recv_msg(worker, in, MAX_SIZE, k);
        }
        if (intact(in, n, got, !server, k)) {
            passed++;
        } else {
            failed++;
            printf("ucp_check %s: %zu bytes: received %zu, not intact\n", role,
                   n, got);
        }
    }

    /* both sides are done before either closes its endpoint */
    char done = 1;
    if (full_io(sock, &done, 1, 1) || full_io(sock, &done, 1, 0))
        fprintf(stderr, "ucp_check %s: peer gone before the end\n", role);
    ucp_request_param_t close_prm = {.op_attr_mask = 0}; /* flushes */
    void *req = ucp_ep_close_nbx(ep, &close_prm);
    if (req != NULL && !UCS_PTR_IS_ERR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS)
            ucp_worker_progress(worker);
        ucp_request_free(req);
    }
    ucp_worker_release_address(worker, addr);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    close(sock);
    free(peer);
    free(out);
    free(in);
    printf("ucp_check %s: %zu sizes, %d passed, %d failed, %zu bytes sent\n",
           role, NSIZES, passed, failed, bytes_sent);
    return failed == 0 ? 0 : 1;
}
