/*
 * ivshm-server against clients that speak QEMU's ivshmem protocol: the
 * real server binary, real UNIX sockets, real eventfds and the real region
 * file. Checks the message order of docs/specs/ivshmem-spec.rst, that an
 * interrupt written by one peer reaches exactly the other peer's vector,
 * connect and disconnect notices, clients that are killed or misbehave,
 * round-robin ids, and a clean stop. (tests/qemu/ runs QEMU against it.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../testutil.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#define VECTORS 3
#define REGION_SIZE (4u << 20)

static char region[256], sock_path[96], server_bin[512];
static pid_t server;

struct msg {
    int64_t v;
    int fd; /* -1: none */
};

/* Next protocol message, or v = INT64_MIN on EOF/timeout. */
static struct msg recv_msg(int s, int timeout_ms)
{
    struct msg m = {INT64_MIN, -1};
    struct pollfd p = {.fd = s, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) <= 0)
        return m;
    int64_t v;
    struct iovec iov = {&v, sizeof(v)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
    if (n != sizeof(v))
        return m;
    m.v = v; /* little-endian host */
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (c && c->cmsg_type == SCM_RIGHTS)
        memcpy(&m.fd, CMSG_DATA(c), sizeof(int));
    return m;
}

static int connect_server(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    for (int i = 0; i < 200; i++) {
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return s;
        usleep(10000);
    }
    fail_msg("cannot connect to %s", sock_path);
    return -1;
}

struct client {
    int sock;
    int64_t id;
    int own[VECTORS];          /* our interrupt eventfds */
    int peer_fd[8][VECTORS];   /* by peer id (< 8 here) */
    int peer_n[8];
};

static void expect_peer(struct client *c, int64_t id)
{
    for (int v = 0; v < VECTORS; v++) {
        struct msg m = recv_msg(c->sock, 5000);
        assert_int_equal(m.v, id);
        assert_true(m.fd >= 0);
        assert_true(id >= 0 && id < 8);
        c->peer_fd[id][c->peer_n[id]++] = m.fd;
    }
}

/* Connects and checks the set-up sequence; existing = ids already there,
 * or with n < 0 whichever peers the server announces. */
static void client_connect(struct client *c, const int64_t *existing, int n)
{
    memset(c, 0xff, sizeof(*c));
    memset(c->peer_n, 0, sizeof(c->peer_n));
    c->sock = connect_server();
    assert_int_equal(recv_msg(c->sock, 5000).v, 0); /* protocol version */
    struct msg id = recv_msg(c->sock, 5000);
    assert_true(id.v >= 0 && id.v <= 65535);
    assert_int_equal(id.fd, -1);
    c->id = id.v;
    struct msg shm = recv_msg(c->sock, 5000);
    assert_int_equal(shm.v, -1);
    assert_true(shm.fd >= 0);
    /* the fd is the region: same size, same bytes */
    struct stat st;
    assert_int_equal(fstat(shm.fd, &st), 0);
    assert_int_equal(st.st_size, REGION_SIZE);
    unsigned char *p =
        mmap(NULL, REGION_SIZE, PROT_READ, MAP_SHARED, shm.fd, 0);
    assert_true(p != MAP_FAILED);
    assert_memory_equal(p, "IVHMSRG1", 8);
    munmap(p, REGION_SIZE);
    close(shm.fd);
    for (int i = 0; i < n; i++)
        expect_peer(c, existing[i]);
    int v0 = 0;
    while (n < 0) {
        struct msg m = recv_msg(c->sock, 5000);
        if (m.v == c->id) { /* our own first vector: the peers are done */
            assert_true(m.fd >= 0);
            c->own[v0++] = m.fd;
            break;
        }
        assert_true(m.v >= 0 && m.v < 8 && m.fd >= 0);
        c->peer_fd[m.v][c->peer_n[m.v]++] = m.fd;
    }
    for (int v = v0; v < VECTORS; v++) {
        struct msg m = recv_msg(c->sock, 5000);
        assert_int_equal(m.v, c->id);
        assert_true(m.fd >= 0);
        c->own[v] = m.fd;
    }
}

static void client_close(struct client *c)
{
    close(c->sock);
    for (int v = 0; v < VECTORS; v++)
        close(c->own[v]);
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < c->peer_n[i]; k++)
            close(c->peer_fd[i][k]);
}

static void expect_gone(struct client *c, int64_t id)
{
    struct msg m = recv_msg(c->sock, 5000);
    assert_int_equal(m.v, id);
    assert_int_equal(m.fd, -1);
}

static void expect_quiet(struct client *c)
{
    assert_int_equal(recv_msg(c->sock, 100).v, INT64_MIN);
}

static uint64_t efd_take(int fd)
{
    uint64_t v = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 1000) == 1 && read(fd, &v, sizeof(v)) != sizeof(v))
        v = 0;
    return v;
}

static pid_t start_server(const char *extra)
{
    pid_t pid = fork();
    if (pid == 0) {
        char vec[8];
        snprintf(vec, sizeof(vec), "%d", VECTORS);
        if (extra)
            execl(server_bin, server_bin, "-S", sock_path, "-m", region, "-n",
                  vec, extra, (char *)NULL);
        else
            execl(server_bin, server_bin, "-S", sock_path, "-m", region, "-n",
                  vec, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int setup(void **state)
{
    (void)state;
    const char *b = getenv("top_builddir");
    snprintf(server_bin, sizeof(server_bin), "%s/qemu-config/ivshm-server",
             b ? b : ".");
    tu_region_path(region, sizeof(region), "server");
    snprintf(sock_path, sizeof(sock_path), "/tmp/ivshm-test-%d.sock",
             (int)getpid());
    if (tu_format(region, REGION_SIZE, 0, 0) != IVSHM_OK)
        return -1;
    server = start_server(NULL);
    return server > 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (server > 0) {
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
    }
    unlink(region);
    unlink(sock_path);
    return 0;
}

static void test_protocol(void **state)
{
    (void)state;
    struct client a, b;
    client_connect(&a, NULL, 0);
    assert_int_equal(a.id, 0); /* the first client gets id 0 */
    int64_t ids_a[] = {a.id};
    client_connect(&b, ids_a, 1);
    assert_int_equal(b.id, 1);
    expect_peer(&a, b.id); /* connect notice to the old client */
    expect_quiet(&a);
    expect_quiet(&b);

    /* a interrupts b on vector 2 the way QEMU does: write 1 to b's fd */
    uint64_t one = 1;
    assert_int_equal(write(a.peer_fd[b.id][2], &one, 8), 8);
    assert_int_equal(efd_take(b.own[2]), 1);
    struct pollfd pf[2] = {{.fd = b.own[0], .events = POLLIN},
                           {.fd = b.own[1], .events = POLLIN}};
    assert_int_equal(poll(pf, 2, 50), 0); /* other vectors stay quiet */
    assert_int_equal(write(b.peer_fd[a.id][0], &one, 8), 8);
    assert_int_equal(efd_take(a.own[0]), 1);

    /* a client killed without closing anything: the others are told */
    pid_t victim = fork();
    if (victim == 0) {
        struct client c;
        int64_t ids[] = {0, 1};
        client_connect(&c, ids, 2);
        pause();
        _exit(0);
    }
    expect_peer(&a, 2);
    expect_peer(&b, 2);
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    expect_gone(&a, 2);
    expect_gone(&b, 2);

    /* ids go round-robin: the next client is 3, not the freed 2 */
    struct client d;
    int64_t ids_ab[] = {0, 1};
    client_connect(&d, ids_ab, 2);
    assert_int_equal(d.id, 3);
    expect_peer(&a, 3);
    expect_peer(&b, 3);

    /* a client that talks breaks the protocol: dropped, others told */
    assert_int_equal(write(d.sock, "junk", 4), 4);
    expect_gone(&a, 3);
    expect_gone(&b, 3);
    client_close(&d);

    /* a client that connects and leaves at once harms nobody. The others
     * hear of it not at all (it left during its set-up) or as a connect
     * notice followed by a disconnect notice: which one is a race. So a
     * marker client connects after it (id 5): ids and connect notices go
     * in connection order, so a hears any notice of 4's connection before
     * the marker's, and then waits for 4's disconnect notice. */
    int s = connect_server();
    close(s);
    struct client e;
    client_connect(&e, NULL, -1);
    assert_int_equal(e.id, 5);
    bool four_seen = false, four_gone = false;
    for (int marker = 0; marker < VECTORS || (four_seen && !four_gone);) {
        struct msg m = recv_msg(a.sock, 5000);
        if (m.v == 4 && m.fd >= 0 && !four_gone)
            four_seen = true;
        else if (m.v == 4 && m.fd < 0 && four_seen)
            four_gone = true;
        else if (m.v == 5 && m.fd >= 0)
            marker++;
        else
            fail_msg("unexpected notice %lld (fd %d) after a client that "
                     "left at once",
                     (long long)m.v, m.fd);
        if (m.fd >= 0)
            close(m.fd);
    }
    client_close(&e);
    expect_gone(&a, 5);
    expect_quiet(&a);

    client_close(&b);
    expect_gone(&a, 1);
    client_close(&a);

    /* SIGTERM: exits 0 and removes its socket */
    kill(server, SIGTERM);
    int status;
    assert_int_equal(waitpid(server, &status, 0), server);
    server = 0;
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(access(sock_path, F_OK), -1);
}

static void test_refusals(void **state)
{
    (void)state;
    /* a second server on a live socket refuses to start */
    server = start_server(NULL);
    int s = connect_server();
    pid_t second = start_server(NULL);
    int status;
    assert_int_equal(waitpid(second, &status, 0), second);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    close(s);
    kill(server, SIGKILL); /* leaves a stale socket behind */
    waitpid(server, NULL, 0);
    /* a stale socket is replaced */
    server = start_server("--max-peers=1");
    struct client a;
    client_connect(&a, NULL, 0);
    /* beyond --max-peers: the connection is closed without a word */
    int t = connect_server();
    assert_int_equal(recv_msg(t, 2000).v, INT64_MIN);
    close(t);
    client_close(&a);
    kill(server, SIGTERM);
    waitpid(server, NULL, 0);
    server = 0;

    /* a missing region: exit 1 and a message, no socket */
    char missing[300];
    snprintf(missing, sizeof(missing), "%s-missing", region);
    pid_t p = fork();
    if (p == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        execl(server_bin, server_bin, "-S", sock_path, "-m", missing,
              (char *)NULL);
        _exit(127);
    }
    assert_int_equal(waitpid(p, &status, 0), p);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_protocol),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
