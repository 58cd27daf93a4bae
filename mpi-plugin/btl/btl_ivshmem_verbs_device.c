/*
 * BTL ivshmem, verbs route: MCA parameters, the device and its address,
 * the RDMA CM listener, the protection domain, the completion queue, the
 * registration cache (rcache grdma) and the send buffers; and their
 * release. No device, no active port or no address at start-up make the
 * route step aside with one message (btl_ivshmem_verbs 1) or a verbose
 * line (-1); the job then uses tcp if it is listed.
 */
#include "btl_ivshmem_verbs.h"

#include "opal/mca/rcache/base/base.h"
#include "opal/util/output.h"
#include "opal/util/show_help.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


ivshmem_verbs_t ivshmem_verbs;

static void frag_construct(ivshmem_verbs_frag_t *f)
{
    f->base.des_segments = &f->segment;
    f->base.des_segment_count = 1;
}
OBJ_CLASS_INSTANCE(ivshmem_verbs_frag_t, mca_btl_base_descriptor_t,
                   frag_construct, NULL);

/* ---- parameters ---- */

static void reg_int(const mca_base_component_t *comp, const char *name,
                    const char *doc, int *storage, int def)
{
    *storage = def;
    mca_base_component_var_register(comp, name, doc, MCA_BASE_VAR_TYPE_INT,
                                    NULL, 0, 0, OPAL_INFO_LVL_4,
                                    MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static void reg_size(const mca_base_component_t *comp, const char *name,
                     const char *doc, size_t *storage)
{
    mca_base_component_var_register(comp, name, doc,
                                    MCA_BASE_VAR_TYPE_SIZE_T, NULL, 0, 0,
                                    OPAL_INFO_LVL_5,
                                    MCA_BASE_VAR_SCOPE_READONLY, storage);
}

void ivshmem_verbs_register_params(const mca_base_component_t *comp)
{
    reg_int(comp, "verbs",
            "Verbs route to peers on other hosts (RC queue pairs over "
            "InfiniBand or RoCE, connected by RDMA CM): -1 = where an RDMA "
            "device is (silently absent otherwise), 1 = on (a missing "
            "device is reported), 0 = off",
            &IVSHMEM_VERBS->enable, -1);
    IVSHMEM_VERBS->device = (char *)"";
    mca_base_component_var_register(
        comp, "verbs_device",
        "RDMA device of the verbs route (ibv_devices lists them); empty: "
        "the first with an active port",
        MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_4,
        MCA_BASE_VAR_SCOPE_READONLY, &IVSHMEM_VERBS->device);
    reg_int(comp, "verbs_port", "Port of the verbs device",
            &IVSHMEM_VERBS->port, 1);
    reg_int(comp, "verbs_gid_index",
            "GID index whose address the verbs route listens on (RoCE: an "
            "IPv4-mapped GID, see ibv_devinfo -v); -1: the first IPv4-mapped "
            "GID, else the device's IPoIB interface",
            &IVSHMEM_VERBS->gid_index, -1);
    reg_int(comp, "verbs_resolve_timeout",
            "Milliseconds for RDMA CM to resolve a peer's address and route",
            &IVSHMEM_VERBS->resolve_timeout_ms, 5000);
    reg_int(comp, "verbs_connect_timeout",
            "Seconds a connection may take before the job ends with an "
            "error (raise it for emulated guests)",
            &IVSHMEM_VERBS->connect_timeout_s, 60);
    reg_int(comp, "verbs_retry_count",
            "Transport retries of an unacknowledged packet (0-7)",
            &IVSHMEM_VERBS->retry_count, 7);
    reg_int(comp, "verbs_rnr_retry",
            "Receiver-not-ready retries (0-7, 7 = without end); both sides "
            "post their buffers before connecting and credits keep them "
            "posted, so only a flow-control bug meets one, and the default "
            "0 ends the job at the first",
            &IVSHMEM_VERBS->rnr_retry, 0);
    reg_int(comp, "verbs_ack_timeout",
            "Local ACK timeout exponent: 4.096 us * 2^N before a retry "
            "(14 = 67 ms; emulated guests need ~20 = 4.3 s)",
            &IVSHMEM_VERBS->ack_timeout, 18);
    reg_int(comp, "verbs_rq_depth",
            "Receive buffers posted per connection (the peer's credits; "
            "4-4096)",
            &IVSHMEM_VERBS->rq_param, 64);
    reg_int(comp, "verbs_sq_depth",
            "Send work requests per connection (8-4096)",
            &IVSHMEM_VERBS->sq_param, 128);

    /* The module's own attributes (the region module's carry the plain
     * btl_ivshmem_* names) */
    mca_btl_base_module_t *m = &mca_btl_ivshmem_verbs_module;
    m->btl_exclusivity = MCA_BTL_EXCLUSIVITY_DEFAULT; /* > tcp, < region */
    m->btl_eager_limit = 12 * 1024;
    m->btl_rndv_eager_limit = 12 * 1024;
    m->btl_max_send_size = 64 * 1024;
    m->btl_latency = 10;
    m->btl_bandwidth = 10000;
    reg_size(comp, "verbs_eager_limit",
             "Largest message the verbs route sends eagerly", &m->btl_eager_limit);
    reg_size(comp, "verbs_max_send_size",
             "Largest fragment the verbs route sends (bytes per receive "
             "buffer, less its 8-byte header)",
             &m->btl_max_send_size);
    mca_base_component_var_register(comp, "verbs_exclusivity",
                                    "Exclusivity of the verbs route",
                                    MCA_BASE_VAR_TYPE_UNSIGNED_INT, NULL, 0, 0,
                                    OPAL_INFO_LVL_5,
                                    MCA_BASE_VAR_SCOPE_READONLY,
                                    &m->btl_exclusivity);
    mca_base_component_var_register(comp, "verbs_latency",
                                    "Latency of the verbs route (relative)",
                                    MCA_BASE_VAR_TYPE_UNSIGNED_INT, NULL, 0, 0,
                                    OPAL_INFO_LVL_5,
                                    MCA_BASE_VAR_SCOPE_READONLY,
                                    &m->btl_latency);
    mca_base_component_var_register(comp, "verbs_bandwidth",
                                    "Bandwidth of the verbs route (Mb/s)",
                                    MCA_BASE_VAR_TYPE_UNSIGNED_INT, NULL, 0, 0,
                                    OPAL_INFO_LVL_5,
                                    MCA_BASE_VAR_SCOPE_READONLY,
                                    &m->btl_bandwidth);
}

/* ---- start-up ---- */

static int step_aside(const char *why, const char *detail)
{
    char host[256] = "?";
    gethostname(host, sizeof(host));
    if (IVSHMEM_VERBS->enable == 1)
        opal_show_help("help-mpi-btl-ivshmem.txt", "verbs-unavailable", true,
                       host, why, detail);
    else
        opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                            "btl ivshmem: verbs route not used on %s: %s: %s",
                            host, why, detail);
    ivshmem_verbs_teardown();
    return OPAL_ERR_NOT_AVAILABLE;
}

static bool gid_ipv4(const union ibv_gid *g, uint32_t *ip)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(g->raw, prefix, sizeof(prefix)) != 0)
        return false;
    memcpy(ip, g->raw + 12, 4);
    return *ip != 0;
}

/* InfiniBand: the IPv4 address of the device's IPoIB interface */
static bool ipoib_ipv4(const char *dev, uint32_t *ip)
{
    char path[256];
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/net", dev);
    DIR *d = opendir(path);
    if (!d)
        return false;
    struct ifaddrs *ifa = NULL;
    bool found = false;
    if (getifaddrs(&ifa) == 0) {
        struct dirent *e;
        while (!found && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            for (struct ifaddrs *i = ifa; i && !found; i = i->ifa_next)
                if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                    strcmp(i->ifa_name, e->d_name) == 0) {
                    *ip = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
                    found = true;
                }
        }
        freeifaddrs(ifa);
    }
    closedir(d);
    return found;
}

/* Finds the device, the port and the address to listen on. */
static int pick_address(uint32_t *ip, char *why, size_t whylen)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        snprintf(why, whylen, "no RDMA device (ibv_get_device_list: %s)",
                 list ? "none" : strerror(errno));
        if (list)
            ibv_free_device_list(list);
        return -1;
    }
    snprintf(why, whylen, "no device named '%s'", IVSHMEM_VERBS->device);
    int rc = -1;
    for (int i = 0; i < n && rc != 0; i++) {
        const char *name = ibv_get_device_name(list[i]);
        if (IVSHMEM_VERBS->device[0] &&
            strcmp(name, IVSHMEM_VERBS->device) != 0)
            continue;
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) {
            snprintf(why, whylen, "%s: cannot open: %s", name, strerror(errno));
            continue;
        }
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, (uint8_t)IVSHMEM_VERBS->port, &pa) != 0) {
            snprintf(why, whylen, "%s: no port %d", name, IVSHMEM_VERBS->port);
        } else if (pa.state != IBV_PORT_ACTIVE) {
            snprintf(why, whylen, "%s port %d is not active (%s)", name,
                     IVSHMEM_VERBS->port, ibv_port_state_str(pa.state));
        } else {
            union ibv_gid g;
            int lo =
                IVSHMEM_VERBS->gid_index >= 0 ? IVSHMEM_VERBS->gid_index : 0;
            int hi = IVSHMEM_VERBS->gid_index >= 0
                         ? IVSHMEM_VERBS->gid_index + 1
                         : pa.gid_tbl_len;
            for (int k = lo; k < hi && rc != 0; k++)
                if (ibv_query_gid(ctx, (uint8_t)IVSHMEM_VERBS->port, k, &g) ==
                        0 &&
                    gid_ipv4(&g, ip))
                    rc = 0;
            if (rc != 0 && IVSHMEM_VERBS->gid_index < 0 && ipoib_ipv4(name, ip))
                rc = 0;
            if (rc != 0)
                snprintf(why, whylen,
                         IVSHMEM_VERBS->gid_index >= 0
                             ? "%s port %d: GID index %d is not an IPv4 address"
                             : "%s port %d: no IPv4 address (no IPv4-mapped "
                               "GID, no IPoIB interface)",
                         name, IVSHMEM_VERBS->port, IVSHMEM_VERBS->gid_index);
            else
                snprintf(IVSHMEM_VERBS->devname, sizeof(IVSHMEM_VERBS->devname),
                         "%s", name);
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return rc;
}

static int reg_mem(void *data, void *base, size_t size,
                   mca_rcache_base_registration_t *reg)
{
    (void)data;
    ivshmem_verbs_reg_t *r = (ivshmem_verbs_reg_t *)reg;
    r->mr = ibv_reg_mr(IVSHMEM_VERBS->pd, base, size,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_WRITE);
    if (!r->mr)
        return OPAL_ERR_OUT_OF_RESOURCE;
    r->handle.lkey = r->mr->lkey;
    r->handle.rkey = r->mr->rkey;
    return OPAL_SUCCESS;
}

static int dereg_mem(void *data, mca_rcache_base_registration_t *reg)
{
    (void)data;
    ivshmem_verbs_reg_t *r = (ivshmem_verbs_reg_t *)reg;
    if (r->mr && ibv_dereg_mr(r->mr) != 0)
        return OPAL_ERROR;
    r->mr = NULL;
    return OPAL_SUCCESS;
}

int ivshmem_verbs_setup(uint32_t nprocs, ivshmem_verbs_addr_t *addr)
{
    char why[256];
    if (IVSHMEM_VERBS->enable == 0)
        return OPAL_ERR_NOT_AVAILABLE;
    int rq = IVSHMEM_VERBS->rq_param, sq = IVSHMEM_VERBS->sq_param;
    IVSHMEM_VERBS->rq_depth = rq < 4 ? 4 : rq > 4096 ? 4096 : (unsigned)rq;
    IVSHMEM_VERBS->sq_depth = sq < 8 ? 8 : sq > 4096 ? 4096 : (unsigned)sq;
    uint32_t ip = 0;
    if (pick_address(&ip, why, sizeof(why)) != 0)
        return step_aside("no usable RDMA device", why);
    if (!(IVSHMEM_VERBS->ech = rdma_create_event_channel()))
        return step_aside("cannot open RDMA CM (rdma_ucm loaded?)",
                          strerror(errno));
    int fl = fcntl(IVSHMEM_VERBS->ech->fd, F_GETFL);
    if (fl < 0 || fcntl(IVSHMEM_VERBS->ech->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return step_aside("RDMA CM event channel", strerror(errno));
    if (rdma_create_id(IVSHMEM_VERBS->ech, &IVSHMEM_VERBS->listen_id, NULL,
                       RDMA_PS_TCP) != 0)
        return step_aside("rdma_create_id", strerror(errno));
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = ip;
    char ipstr[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &ip, ipstr, sizeof(ipstr));
    if (rdma_bind_addr(IVSHMEM_VERBS->listen_id, (struct sockaddr *)&sin) !=
        0) {
        snprintf(why, sizeof(why), "%s: %s", ipstr, strerror(errno));
        return step_aside("cannot bind RDMA CM to the device's address", why);
    }
    if (!IVSHMEM_VERBS->listen_id->verbs) {
        snprintf(why, sizeof(why), "%s belongs to no RDMA device", ipstr);
        return step_aside("cannot bind RDMA CM", why);
    }
    if (rdma_listen(IVSHMEM_VERBS->listen_id, 128) != 0)
        return step_aside("rdma_listen", strerror(errno));
    struct ibv_context *ctx = IVSHMEM_VERBS->listen_id->verbs;
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da) != 0)
        return step_aside("ibv_query_device", strerror(errno));
    if (!(IVSHMEM_VERBS->pd = ibv_alloc_pd(ctx)))
        return step_aside("ibv_alloc_pd", strerror(errno));
    IVSHMEM_VERBS->cq_size = da.max_cqe < 4096 ? da.max_cqe : 4096;
    if (!(IVSHMEM_VERBS->cq =
              ibv_create_cq(ctx, IVSHMEM_VERBS->cq_size, NULL, NULL, 0)))
        return step_aside("ibv_create_cq", strerror(errno));

    mca_rcache_base_resources_t res;
    memset(&res, 0, sizeof(res));
    res.cache_name = (char *)"ivshmem-verbs";
    res.sizeof_reg = sizeof(ivshmem_verbs_reg_t);
    res.register_mem = reg_mem;
    res.deregister_mem = dereg_mem;
    if (!(IVSHMEM_VERBS->rcache =
              mca_rcache_base_module_create("grdma", NULL, &res)))
        return step_aside("no registration cache", "rcache grdma missing");
    mca_btl_base_module_t *m = &mca_btl_ivshmem_verbs_module;
    if (m->btl_max_send_size < 1024)
        m->btl_max_send_size = 1024;
    if (m->btl_max_send_size > 1024 * 1024)
        m->btl_max_send_size = 1024 * 1024;
    mca_btl_ivshmem_clamp_eager(m);
    m->btl_get_limit = m->btl_put_limit = SIZE_MAX; /* split into WRs here */
    m->btl_get_alignment = m->btl_put_alignment = 0;
    /* ob1 registers both sides of an RDMA transfer */
    m->btl_get_local_registration_threshold = 0;
    m->btl_put_local_registration_threshold = 0;
    m->btl_rdma_pipeline_send_length = 1024 * 1024;
    m->btl_rdma_pipeline_frag_size = 1024 * 1024;
    m->btl_min_rdma_pipeline_size = 256 * 1024;
    OBJ_CONSTRUCT(&IVSHMEM_VERBS->frags, opal_free_list_t);
    OBJ_CONSTRUCT(&IVSHMEM_VERBS->rdma_frags, opal_free_list_t);
    IVSHMEM_VERBS->frags_ready = true;
    int rc = opal_free_list_init(
        &IVSHMEM_VERBS->frags, sizeof(ivshmem_verbs_frag_t),
        opal_cache_line_size, OBJ_CLASS(ivshmem_verbs_frag_t),
        sizeof(ivshmem_verbs_hdr_t) + m->btl_max_send_size,
        opal_cache_line_size, 32, -1, 32, NULL, 0, IVSHMEM_VERBS->rcache, NULL,
        NULL);
    if (rc == OPAL_SUCCESS)
        rc = opal_free_list_init(
            &IVSHMEM_VERBS->rdma_frags, sizeof(ivshmem_verbs_frag_t),
            opal_cache_line_size, OBJ_CLASS(ivshmem_verbs_frag_t), 0, 0, 32, -1,
            32, NULL, 0, NULL, NULL, NULL);
    if (rc != OPAL_SUCCESS)
        return step_aside("cannot register send buffers", "free list");
    if (!(IVSHMEM_VERBS->conns = calloc(nprocs, sizeof(*IVSHMEM_VERBS->conns))))
        return step_aside("out of memory", "connections");
    IVSHMEM_VERBS->nconns = nprocs;

    memset(addr, 0, sizeof(*addr));
    addr->ipv4 = ip;
    addr->port = rdma_get_src_port(IVSHMEM_VERBS->listen_id);
    addr->rq_depth = (uint16_t)IVSHMEM_VERBS->rq_depth;
    addr->buf_size = (uint32_t)(sizeof(ivshmem_verbs_hdr_t) + m->btl_max_send_size);
    IVSHMEM_VERBS->self = *addr;
    opal_output_verbose(1, IVSHMEM_COMPONENT->output,
                        "btl ivshmem: verbs route on %s port %d, %s:%u",
                        IVSHMEM_VERBS->devname, IVSHMEM_VERBS->port, ipstr,
                        ntohs(addr->port));
    return OPAL_SUCCESS;
}

void ivshmem_verbs_teardown(void)
{
    if (IVSHMEM_VERBS->conns) {
        for (uint32_t i = 0; i < IVSHMEM_VERBS->nconns; i++)
            if (IVSHMEM_VERBS->conns[i]) {
                ivshmem_verbs_conn_t *vc = IVSHMEM_VERBS->conns[i];
                if (vc->ep)
                    vc->ep->vc = NULL;
                IVSHMEM_VERBS->conns[i] = NULL;
                ivshmem_verbs_conn_free(vc);
            }
        free(IVSHMEM_VERBS->conns);
        IVSHMEM_VERBS->conns = NULL;
    }
    IVSHMEM_VERBS->nconns = 0;
    IVSHMEM_VERBS->connecting = 0;
    if (IVSHMEM_VERBS->frags_ready) {
        OBJ_DESTRUCT(&IVSHMEM_VERBS->frags);
        OBJ_DESTRUCT(&IVSHMEM_VERBS->rdma_frags);
        IVSHMEM_VERBS->frags_ready = false;
    }
    if (IVSHMEM_VERBS->rcache) {
        mca_rcache_base_module_destroy(IVSHMEM_VERBS->rcache);
        IVSHMEM_VERBS->rcache = NULL;
    }
    if (IVSHMEM_VERBS->cq) {
        ibv_destroy_cq(IVSHMEM_VERBS->cq);
        IVSHMEM_VERBS->cq = NULL;
    }
    if (IVSHMEM_VERBS->pd) {
        ibv_dealloc_pd(IVSHMEM_VERBS->pd);
        IVSHMEM_VERBS->pd = NULL;
    }
    if (IVSHMEM_VERBS->listen_id) {
        rdma_destroy_id(IVSHMEM_VERBS->listen_id);
        IVSHMEM_VERBS->listen_id = NULL;
    }
    if (IVSHMEM_VERBS->ech) {
        rdma_destroy_event_channel(IVSHMEM_VERBS->ech);
        IVSHMEM_VERBS->ech = NULL;
    }
}
