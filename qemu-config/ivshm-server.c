/*
 * ivshm-server: the ivshmem server for doorbell mode.
 *
 * QEMU's ivshmem-doorbell devices connect to it over a UNIX socket
 * (-chardev socket,path=...). It speaks QEMU's documented protocol
 * (docs/specs/ivshmem-spec.rst): every message is one little-endian int64,
 * some carry a file descriptor (SCM_RIGHTS):
 *
 *   to a new client:  0 (protocol version), its peer id, -1 + the shm fd,
 *                     for every other peer: its id + one eventfd per vector,
 *                     then its own id + its own eventfds (interrupt setup)
 *   to the others:    the new id + its eventfds (connect notice)
 *   on disconnect:    the id without a fd, to everyone left
 *
 * Clients never send anything; a readable or hung-up client socket means
 * the client is gone (QEMU exited or was killed), and so does a client
 * whose socket is full. The server survives any client, never blocks on
 * one, and hands out ids round-robin so that a stale doorbell for a peer
 * that just left does not reach its successor.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ivshm/ivshm.h"

#define MAX_VECTORS 64
#define MAX_ID 65535

struct peer {
    int sock;
    int id;
    bool dead; /* to be dropped by reap() */
    const char *why;
    int efd[MAX_VECTORS];
};

static struct {
    const char *socket_path;
    const char *region;
    const char *pidfile;
    unsigned vectors;
    unsigned max_peers;
    mode_t mode;
    const char *group;
    int verbose;
} opt = {NULL, NULL, NULL, 1, 64, 0600, NULL, 0};

static int shm_fd = -1, listen_fd = -1;
static struct peer *peers;
static unsigned npeers;
static int next_id;
static volatile sig_atomic_t stop;

static void logmsg(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logmsg(int level, const char *fmt, ...)
{
    if (level > opt.verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("ivshm-server: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* One protocol message: an int64 (little-endian) and maybe one fd. */
static int send_msg(int sock, int64_t value, int fd)
{
    uint64_t le = (uint64_t)value;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    le = __builtin_bswap64(le);
#endif
    struct iovec iov = {&le, sizeof(le)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&u, 0, sizeof(u));
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof(u.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ssize_t n;
    do
        n = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof(le) ? 0 : -1;
}

static bool id_in_use(int id)
{
    for (unsigned i = 0; i < npeers; i++)
        if (peers[i].id == id)
            return true;
    return false;
}

static void free_peer(struct peer *p)
{
    close(p->sock);
    for (unsigned v = 0; v < opt.vectors; v++)
        close(p->efd[v]);
}

/* Sends p's connect notice (its id + eventfds) to sock. */
static int send_connect(int sock, const struct peer *p)
{
    for (unsigned v = 0; v < opt.vectors; v++)
        if (send_msg(sock, p->id, p->efd[v]) < 0)
            return -1;
    return 0;
}

static void mark_dead(struct peer *p, const char *why)
{
    if (!p->dead) {
        p->dead = true;
        p->why = why;
    }
}

/* Drops dead peers and tells the others; a peer that cannot be told is
 * dead too, so this repeats until nobody else fails. */
static void reap(void)
{
    for (bool again = true; again;) {
        again = false;
        for (unsigned i = 0; i < npeers; i++) {
            if (!peers[i].dead)
                continue;
            struct peer p = peers[i];
            peers[i--] = peers[--npeers];
            logmsg(0, "peer %d left (%s); %u connected", p.id, p.why, npeers);
            free_peer(&p);
            for (unsigned j = 0; j < npeers; j++)
                if (!peers[j].dead && send_msg(peers[j].sock, p.id, -1) < 0) {
                    mark_dead(&peers[j], "cannot be sent a disconnect notice");
                    again = true;
                }
        }
    }
}

static void accept_peer(void)
{
    int s = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0) {
        if (errno != EAGAIN && errno != EINTR)
            logmsg(0, "accept: %s", strerror(errno));
        return;
    }
    if (npeers >= opt.max_peers) {
        logmsg(0, "refusing a client: %u peers connected (--max-peers)",
               npeers);
        close(s);
        return;
    }
    struct peer p = {.sock = s, .id = -1};
    for (int tries = 0; tries <= MAX_ID; tries++) {
        int id = (next_id + tries) % (MAX_ID + 1);
        if (!id_in_use(id)) {
            p.id = id;
            next_id = id + 1;
            break;
        }
    }
    unsigned made = 0;
    for (; made < opt.vectors; made++) {
        p.efd[made] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (p.efd[made] < 0)
            break;
    }
    if (p.id < 0 || made < opt.vectors) {
        logmsg(0, "refusing a client: %s",
               p.id < 0 ? "no free peer id" : strerror(errno));
        while (made > 0)
            close(p.efd[--made]);
        close(s);
        return;
    }
    /* the new client's view: version, id, memory, the others, itself */
    bool ok = send_msg(s, 0, -1) == 0 && send_msg(s, p.id, -1) == 0 &&
              send_msg(s, -1, shm_fd) == 0;
    for (unsigned i = 0; ok && i < npeers; i++)
        ok = send_connect(s, &peers[i]) == 0;
    ok = ok && send_connect(s, &p) == 0;
    if (!ok) {
        logmsg(0, "client for id %d went away during set-up", p.id);
        free_peer(&p);
        return;
    }
    peers[npeers++] = p;
    logmsg(0, "peer %d connected; %u connected", p.id, npeers);
    /* the others learn about it */
    for (unsigned i = 0; i + 1 < npeers; i++)
        if (!peers[i].dead && send_connect(peers[i].sock, &p) < 0)
            mark_dead(&peers[i], "cannot be sent a connect notice");
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ivshm-server -S SOCKET -m REGION [options]\n"
            "Serves ivshmem-doorbell devices (QEMU -chardev socket,path=SOCKET)\n"
            "with the shared memory REGION and one eventfd per vector.\n\n"
            "  -S, --socket PATH     UNIX socket to listen on\n"
            "  -m, --region PATH     backing file of the shared memory (e.g.\n"
            "                        /dev/shm/NAME or a hugetlbfs file); it must\n"
            "                        exist (see ivshm-host create)\n"
            "  -n, --vectors N       interrupt vectors per peer (1-%d, default 1);\n"
            "                        QEMU's vectors= must be the same\n"
            "  -M, --max-peers N     refuse clients beyond N (default 64)\n"
            "      --mode OCTAL      socket permissions (default 0600)\n"
            "      --group NAME      socket group (e.g. the group QEMU runs as)\n"
            "  -p, --pidfile PATH    write the pid here\n"
            "  -v, --verbose         log more\n"
            "  -h, --help            this text\n"
            "It runs in the foreground (systemd: see ivshm-server@.service).\n",
            MAX_VECTORS);
}

static int parse_args(int argc, char **argv)
{
    static const struct option lo[] = {
        {"socket", required_argument, NULL, 'S'},
        {"region", required_argument, NULL, 'm'},
        {"vectors", required_argument, NULL, 'n'},
        {"max-peers", required_argument, NULL, 'M'},
        {"mode", required_argument, NULL, 1},
        {"group", required_argument, NULL, 2},
        {"pidfile", required_argument, NULL, 'p'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "S:m:n:M:p:vh", lo, NULL)) != -1) {
        switch (c) {
        case 'S': opt.socket_path = optarg; break;
        case 'm': opt.region = optarg; break;
        case 'n':
            opt.vectors = (unsigned)strtoul(optarg, &end, 10);
            if (*end || opt.vectors < 1 || opt.vectors > MAX_VECTORS) {
                fprintf(stderr, "ivshm-server: --vectors must be 1..%d\n",
                        MAX_VECTORS);
                return 2;
            }
            break;
        case 'M':
            opt.max_peers = (unsigned)strtoul(optarg, &end, 10);
            if (*end || opt.max_peers < 1 || opt.max_peers > MAX_ID + 1) {
                fprintf(stderr, "ivshm-server: --max-peers must be 1..%d\n",
                        MAX_ID + 1);
                return 2;
            }
            break;
        case 1:
            opt.mode = (mode_t)strtoul(optarg, &end, 8);
            if (*end || opt.mode > 0777) {
                fprintf(stderr, "ivshm-server: --mode takes octal bits\n");
                return 2;
            }
            break;
        case 2: opt.group = optarg; break;
        case 'p': opt.pidfile = optarg; break;
        case 'v': opt.verbose++; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (!opt.socket_path || !opt.region || optind != argc) {
        usage(stderr);
        return 2;
    }
    return 0;
}

static int open_region(void)
{
    shm_fd = open(opt.region, O_RDWR | O_CLOEXEC);
    if (shm_fd < 0) {
        fprintf(stderr, "ivshm-server: cannot open region %s: %s\n",
                opt.region, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(shm_fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        fprintf(stderr,
                "ivshm-server: region %s must be a non-empty regular file "
                "(create it with ivshm-host create)\n",
                opt.region);
        return -1;
    }
    /* QEMU maps whatever it gets; a libivshm region is checked as a help */
    char uri[4200];
    snprintf(uri, sizeof(uri), "file:%s", opt.region);
    ivshm_region_t *r;
    if (ivshm_region_open(uri, IVSHM_OPEN_RDONLY, &r) == IVSHM_OK) {
        ivshm_region_close(r);
        logmsg(0, "region %s: %lld bytes, a valid libivshm region",
               opt.region, (long long)st.st_size);
    } else {
        logmsg(0, "region %s: %lld bytes; note: not (yet) a valid libivshm "
                  "region: %s",
               opt.region, (long long)st.st_size, ivshm_last_error());
    }
    return 0;
}

static int open_socket(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(opt.socket_path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "ivshm-server: socket path too long: %s\n",
                opt.socket_path);
        return -1;
    }
    strcpy(sa.sun_path, opt.socket_path);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_fd < 0)
        return -1;
    /* a stale socket of a dead server is replaced; a live one is not */
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        fprintf(stderr, "ivshm-server: another server listens on %s\n",
                opt.socket_path);
        close(probe);
        return -1;
    }
    if (probe >= 0)
        close(probe);
    unlink(opt.socket_path);
    mode_t old = umask(0777 & ~opt.mode);
    int rc = bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (rc < 0 || listen(listen_fd, 16) < 0) {
        fprintf(stderr, "ivshm-server: cannot listen on %s: %s\n",
                opt.socket_path, strerror(errno));
        return -1;
    }
    if (chmod(opt.socket_path, opt.mode) < 0)
        logmsg(0, "chmod %s: %s", opt.socket_path, strerror(errno));
    if (opt.group) {
        struct group *g = getgrnam(opt.group);
        if (!g || chown(opt.socket_path, (uid_t)-1, g->gr_gid) < 0) {
            fprintf(stderr, "ivshm-server: cannot give %s to group %s\n",
                    opt.socket_path, opt.group);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = parse_args(argc, argv);
    if (rc)
        return rc;
    if (open_region() < 0 || open_socket() < 0)
        return 1;
    peers = calloc(opt.max_peers, sizeof(*peers));
    struct pollfd *pfds = calloc(opt.max_peers + 1, sizeof(*pfds));
    if (!peers || !pfds) {
        fprintf(stderr, "ivshm-server: out of memory\n");
        return 1;
    }
    if (opt.pidfile) {
        FILE *f = fopen(opt.pidfile, "w");
        if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0) {
            fprintf(stderr, "ivshm-server: cannot write %s\n", opt.pidfile);
            return 1;
        }
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    logmsg(0, "listening on %s, %u vector(s) per peer", opt.socket_path,
           opt.vectors);

    while (!stop) {
        pfds[0] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
        for (unsigned i = 0; i < npeers; i++)
            pfds[i + 1] = (struct pollfd){.fd = peers[i].sock, .events = POLLIN};
        unsigned n = npeers;
        if (poll(pfds, n + 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "ivshm-server: poll: %s\n", strerror(errno));
            break;
        }
        /* clients never talk: input or hang-up both mean it is gone */
        for (unsigned i = 0; i < n; i++) {
            if (!pfds[i + 1].revents)
                continue;
            char b[64];
            ssize_t got = recv(peers[i].sock, b, sizeof(b), MSG_DONTWAIT);
            if (got > 0)
                logmsg(1, "peer %d sent %zd unexpected bytes; dropping it",
                       peers[i].id, got);
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            mark_dead(&peers[i], got == 0 ? "disconnected" : "protocol error");
        }
        reap();
        if (pfds[0].revents & POLLIN)
            accept_peer();
        reap();
    }
    logmsg(0, "stopping; %u peer(s) connected", npeers);
    while (npeers > 0) {
        struct peer p = peers[--npeers];
        free_peer(&p);
    }
    close(listen_fd);
    unlink(opt.socket_path);
    if (opt.pidfile)
        unlink(opt.pidfile);
    free(pfds);
    free(peers);
    return 0;
}
