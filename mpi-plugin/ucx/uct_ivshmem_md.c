/*
 * The `ivshmem` UCT component and memory domain: the region (opened,
 * attached with a lease kept alive by a thread, guarded against the device
 * going away), the channel domain every UCX process of the region joins,
 * the one device it offers (named after the region's UUID), and the
 * registration with UCX, which only happens when the UCX in this process is
 * the one this file was compiled against.
 */
#define _GNU_SOURCE /* dladdr */
#include "uct_ivshmem.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <ucs/sys/string.h>
#include <uct/api/version.h>

static ucs_config_field_t uct_ivshmem_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_ivshmem_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"REGION", "",
     "The libivshm region to carry messages through (file:PATH, pci:auto, "
     "dev:auto, ...). Empty: $IVSHM_REGION, else the guest's ivshmem device. "
     "\"none\" turns the transport off.",
     ucs_offsetof(uct_ivshmem_md_config_t, region), UCS_CONFIG_TYPE_STRING},

    {"DOMAIN", "ucx",
     "The channel domain (a job area of the region) every UCX process of the "
     "region joins; processes reach each other only inside one domain.",
     ucs_offsetof(uct_ivshmem_md_config_t, domain), UCS_CONFIG_TYPE_STRING},

    {"MAX_EPS", "256",
     "Endpoints the domain's directory holds (set by its first member).",
     ucs_offsetof(uct_ivshmem_md_config_t, max_eps), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

static void uct_ivshmem_md_close(uct_md_h tl_md)
{
    uct_ivshmem_md_t *md = ucs_derived_of(tl_md, uct_ivshmem_md_t);
    if (md->r)
        uct_ivshmem_md_track(md, 0);
    ivshm_domain_leave(md->dom);
    if (md->r)
        ivshm_region_close(md->r); /* detaches: our channel memory goes */
    ucs_free(md);
}

/* Without a region nothing to register or allocate (caps come zeroed,
 * host memory accessible: uct_ivshmem_md_query_compat). */
void uct_ivshmem_md_caps(uct_md_h tl_md, uct_ivshmem_md_caps_t *caps)
{
    uct_ivshmem_mem_caps(ucs_derived_of(tl_md, uct_ivshmem_md_t), caps);
}

/* Opens the region and joins the domain. Without a region the memory
 * domain still opens, offering no device: a process that merely loaded
 * the transport goes on with UCX's other transports. */
static const char *uct_ivshmem_md_attach(uct_ivshmem_md_t *md,
                                         const uct_ivshmem_md_config_t *cfg)
{
    const char *uri = cfg->region[0] ? cfg->region : NULL;
    if (uri && strcmp(uri, "none") == 0)
        return "turned off (UCX_IVSHMEM_REGION=none)";
    if (ivshm_region_open(uri, 0, &md->r) != IVSHM_OK)
        return "cannot open the region";
    if (ivshm_attach(md->r) != IVSHM_OK)
        return "cannot attach to the region";
    /* an unplugged device ends the process with one message, not SIGBUS */
    if (ivshm_region_guard(md->r) != IVSHM_OK)
        ucs_diag("ivshmem: no SIGBUS guard: %s", ivshm_last_error());
    /* a process may compute for minutes without progressing UCX */
    if (ivshm_lease_start_thread(md->r) != IVSHM_OK)
        return "cannot start the lease heartbeat";
    if (ivshm_domain_join(md->r, cfg->domain, cfg->max_eps, &md->dom) !=
        IVSHM_OK)
        return "cannot join the channel domain";
    return NULL;
}

static ucs_status_t uct_ivshmem_md_open(uct_component_t *component,
                                        const char *md_name,
                                        const uct_md_config_t *uct_config,
                                        uct_md_h *md_p)
{
    const uct_ivshmem_md_config_t *cfg =
        ucs_derived_of(uct_config, uct_ivshmem_md_config_t);
    static uct_md_ops_t md_ops = {
        .close = uct_ivshmem_md_close,
        .query = uct_ivshmem_md_query_compat,
        .mem_alloc = uct_ivshmem_mem_alloc,
        .mem_free = uct_ivshmem_mem_free,
        .mem_advise = (uct_md_mem_advise_func_t)ucs_empty_function_return_unsupported,
        .mem_reg = uct_ivshmem_mem_reg_compat,
        .mem_dereg = uct_ivshmem_mem_dereg,
        .mem_query = (uct_md_mem_query_func_t)ucs_empty_function_return_unsupported,
        .mkey_pack = uct_ivshmem_mkey_pack_compat,
        UCT_IVSHMEM_MD_OPS_COMPAT
        .detect_memory_type =
            (uct_md_detect_memory_type_func_t)ucs_empty_function_return_unsupported,
    };
    (void)md_name;
    uct_ivshmem_md_t *md = ucs_calloc(1, sizeof(*md), "ivshmem md");
    if (md == NULL)
        return UCS_ERR_NO_MEMORY;
    md->super.ops = &md_ops;
    md->super.component = component;
    const char *why = uct_ivshmem_md_attach(md, cfg);
    if (why) {
        /* named explicitly: say why it is not used; otherwise quiet */
        if (cfg->region[0] && strcmp(cfg->region, "none") != 0)
            ucs_warn("ivshmem: region %s: %s: %s", cfg->region, why,
                     ivshm_last_error());
        else
            ucs_diag("ivshmem: no device: %s: %s", why, ivshm_last_error());
        if (md->r)
            ivshm_region_close(md->r);
        md->r = NULL;
        md->dom = NULL;
    } else {
        ivshm_region_uuid(md->r, md->uuid);
        ucs_snprintf_zero(md->device, sizeof(md->device),
                          "region_%02x%02x%02x%02x", md->uuid[0], md->uuid[1],
                          md->uuid[2], md->uuid[3]);
        ucs_debug("ivshmem: device %s serves region %s", md->device,
                  ivshm_region_uri(md->r));
        uct_ivshmem_md_track(md, 1);
    }
    *md_p = &md->super;
    return UCS_OK;
}

ucs_status_t uct_ivshmem_query_devices(uct_md_h tl_md,
                                       uct_tl_device_resource_t **devices,
                                       unsigned *num_devices)
{
    uct_ivshmem_md_t *md = ucs_derived_of(tl_md, uct_ivshmem_md_t);
    *devices = NULL;
    *num_devices = 0;
    if (md->r == NULL)
        return UCS_OK;
    uct_tl_device_resource_t *d = ucs_calloc(1, sizeof(*d), "ivshmem device");
    if (d == NULL)
        return UCS_ERR_NO_MEMORY;
    ucs_snprintf_zero(d->name, sizeof(d->name), "%s", md->device);
    /* A network to UCX: the peers it reaches are other nodes (other VMs),
     * and Open MPI's pml ucx hands peers on other nodes an address of
     * network devices only (UCP_WORKER_ADDRESS_FLAG_NET_ONLY), which
     * would leave a shared-memory device out. */
    d->type = UCT_DEVICE_TYPE_NET;
    d->sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
    *devices = d;
    *num_devices = 1;
    return UCS_OK;
}

uct_component_t uct_ivshmem_component = {
    .query_md_resources = uct_md_query_single_md_resource,
    .md_open = uct_ivshmem_md_open,
    .cm_open = (uct_component_cm_open_func_t)ucs_empty_function_return_unsupported,
    .rkey_unpack = uct_ivshmem_rkey_unpack,
    /* no pointer into a peer's memory: every access is checked */
    .rkey_ptr = (uct_component_rkey_ptr_func_t)ucs_empty_function_return_unsupported,
    .rkey_release = uct_ivshmem_rkey_release,
    .name = UCT_IVSHMEM_NAME,
    .md_config = {
        .name = "ivshmem memory domain",
        .prefix = "IVSHMEM_",
        .table = uct_ivshmem_md_config_table,
        .size = sizeof(uct_ivshmem_md_config_t),
    },
    .cm_config = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_ivshmem_component),
    .flags = 0,
    .md_vfs_init = (uct_component_md_vfs_init_func_t)ucs_empty_function,
    UCT_IVSHMEM_COMPONENT_COMPAT
};

void uct_ivshmem_say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n;
    if (len >= sizeof(line)) { /* cut: still one line */
        len = sizeof(line) - 1;
        line[len - 1] = '\n';
    }
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w; /* nowhere to say that stderr failed */
}

/* ---- registration ---- */

typedef void (*ucp_version_fn)(unsigned *, unsigned *, unsigned *);

/* The version of the UCX whose libuct this process uses: libucp of the
 * same folder says it (libuct and libucs carry no version), whether or
 * not the program has loaded libucp yet. 0 when it cannot be told. */
static int uct_ivshmem_runtime_version(unsigned v[3], char *where,
                                       size_t where_len)
{
    ucp_version_fn fn = (ucp_version_fn)dlsym(RTLD_DEFAULT, "ucp_get_version");
    snprintf(where, where_len, "libucp in the process");
    if (fn == NULL) {
        Dl_info info;
        if (!dladdr((void *)uct_component_register, &info) || !info.dli_fname)
            return 0;
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", info.dli_fname);
        snprintf(where, where_len, "%s/libucp.so.0", dirname(dir));
        void *h = dlopen(where, RTLD_LAZY | RTLD_LOCAL);
        if (h == NULL)
            return 0;
        fn = (ucp_version_fn)dlsym(h, "ucp_get_version");
        /* stays loaded: a library that ran constructors is not unloaded */
    }
    if (fn == NULL)
        return 0;
    fn(&v[0], &v[1], &v[2]);
    return 1;
}

UCT_TL_DEFINE_ENTRY(&uct_ivshmem_component, ivshmem, uct_ivshmem_query_devices,
                    uct_ivshmem_iface_t, "IVSHMEM_",
                    uct_ivshmem_iface_config_table, uct_ivshmem_iface_config_t);

static int uct_ivshmem_registered;

/* UCX 1.13 opens only the modules named when it was built, so this
 * library registers itself when it is loaded (LD_PRELOAD, or linked):
 * before UCX looks for components, and only into the UCX whose structures
 * it was compiled with (UCX checks no ABI). */
UCS_F_CTOR static void uct_ivshmem_init(void)
{
    unsigned v[3] = {0, 0, 0};
    char where[PATH_MAX + 32];
    int known = uct_ivshmem_runtime_version(v, where, sizeof(where));
    if (!known || v[0] != UCT_VERNO_MAJOR || v[1] != UCT_VERNO_MINOR ||
        v[2] != UCT_VERNO_PATCH) {
        char runs[48];
        if (known)
            snprintf(runs, sizeof(runs), "UCX %u.%u.%u", v[0], v[1], v[2]);
        else
            snprintf(runs, sizeof(runs), "a UCX of unknown version");
        uct_ivshmem_say(
                "libuct_ivshmem: built for UCX %s, but this process runs "
                "%s (%s): the ivshmem transport stays off. Rebuild libivshm "
                "against this UCX's sources (docs/ucx.md).\n",
                UCT_VERNO_STRING, runs, where);
        return;
    }
    uct_component_register(&uct_ivshmem_component);
    uct_tl_register(&uct_ivshmem_component, &UCT_TL_NAME(ivshmem));
    uct_ivshmem_registered = 1;
}

UCS_F_DTOR static void uct_ivshmem_cleanup(void)
{
    if (!uct_ivshmem_registered)
        return;
    uct_tl_unregister(&UCT_TL_NAME(ivshmem));
    uct_component_unregister(&uct_ivshmem_component);
}
