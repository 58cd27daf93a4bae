/*
 * ivshm: the admin and user tool for libivshm regions, on hosts (file:
 * regions) and in guests (pci: devices).
 *   ivshm format | info | list | check | gc   (see ivshm(1))
 * Exit status: 0 on success, else the libivshm status code of the failure.
 */
#include <ivshm/channel.h>
#include <ivshm/ivshm.h>

#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct opts {
    const char *region;
    bool json;
    bool force; /* format: over a valid region; gc: leases in doubt */
    ivshm_format_opts_t fmt;
};

static int usage_main(FILE *f)
{
    fprintf(f,
            "usage: ivshm [--region URI] COMMAND [OPTIONS]\n"
            "\n"
            "Commands:\n"
            "  format   create and format a region\n"
            "  info     show the header, attached VMs, job areas and usage\n"
            "  list     list the ivshmem devices of this machine\n"
            "  check    validate the whole layout (non-zero exit on damage)\n"
            "  gc       reclaim the leases of dead processes, jobs, chunks\n"
            "  stat     per-endpoint channel counters of every job\n"
            "\n"
            "A region is named by a URI: file:/dev/shm/NAME, pci:auto,\n"
            "pci:0000:00:04.0, dev:auto or dev:/dev/ivshmemN (guest driver),\n"
            "auto (dev:auto if the driver is loaded, else pci:auto).\n"
            "Default: $IVSHM_REGION, else auto.\n"
            "'ivshm COMMAND --help' describes each command; see ivshm(1).\n");
    return f == stderr ? 2 : 0;
}

static const char *const cmd_help[][2] = {
    {"format",
     "usage: ivshm format [--region] URI [--size SIZE] [--hugepages] [--force]\n"
     "                    [--chunk SIZE] [--procs N] [--jobs N]\n"
     "                    [--lease-ms MS] [--mode OCTAL] [--json]\n"
     "Creates a file: region of SIZE bytes (suffixes K, M, G; default: keep the\n"
     "file's size) and writes an empty version-1 layout with a new UUID.\n"
     "Refuses a region that is already valid unless --force (attached\n"
     "processes then lose their state). --hugepages requires hugetlbfs.\n"},
    {"info",
     "usage: ivshm info [--region URI] [--json]\n"
     "Prints the header (UUID, version, size), the attached VMs and\n"
     "processes, the job areas and the heap usage.\n"},
    {"list",
     "usage: ivshm list [--json]\n"
     "Lists the ivshmem PCI devices (1af4:1110) of this machine with their\n"
     "BAR2 size, mode and whether this user may map them.\n"},
    {"check",
     "usage: ivshm check [--region URI] [--json]\n"
     "Validates the header, the registry, the job table and the chunk table.\n"
     "Exits non-zero (the status code of the first problem) on damage;\n"
     "notes such as leaked chunks do not fail the check.\n"},
    {"gc",
     "usage: ivshm gc [--region URI] [--force] [--json]\n"
     "Reclaims the registry slots of processes proven dead (this VM: pid\n"
     "gone or reused), jobs without live members and chunks whose owner is\n"
     "gone; a reclaimed process' chunks cool for one lease timeout first.\n"
     "A lease of another VM whose heartbeat is older than the lease timeout\n"
     "is in doubt (its VM may be paused): it is kept and counted. --force\n"
     "releases the leases in doubt too, printing each (slot, VM, pid, age of\n"
     "its heartbeat): use it once those VMs are known to be gone.\n"},
    {"config",
     "usage: ivshm config [--json]\n"
     "Prints the channel configuration table: environment variable,\n"
     "default, allowed range and meaning (a Markdown table).\n"},
    {"stat",
     "usage: ivshm stat [--region URI] [--json]\n"
     "Prints the counters of every channel endpoint of every job: pieces and\n"
     "bytes in and out, sends that found the receiver full, invalid entries\n"
     "dropped, dead peers seen, fast boxes granted and used, wake-ups.\n"},
};

static int cmd_usage(const char *cmd, FILE *f)
{
    for (size_t i = 0; i < sizeof(cmd_help) / sizeof(cmd_help[0]); i++)
        if (strcmp(cmd_help[i][0], cmd) == 0)
            fputs(cmd_help[i][1], f);
    return f == stderr ? 2 : 0;
}

static int fail(const char *cmd, int st)
{
    fprintf(stderr, "ivshm %s: %s: %s\n", cmd, ivshm_strerror(st),
            ivshm_last_error());
    return st;
}

static bool parse_size(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    if (*end != '\0' || end == s)
        return false;
    *out = v;
    return true;
}

/* JSON strings: our own strings are printable ASCII (shared strings are
 * sanitised by the library); quote and backslash are escaped. */
static void jstr(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

static const char *state_name(int s)
{
    static const char *const n[] = {"free", "claiming", "alive", "reclaiming"};
    return s >= 0 && s < 4 ? n[s] : "invalid";
}

static int open_region(const char *cmd, struct opts *o, unsigned flags,
                       ivshm_region_t **r)
{
    int st = ivshm_region_open(o->region, flags, r);
    if (st != IVSHM_OK && !*r)
        return fail(cmd, st);
    return st;
}

static int do_format(struct opts *o)
{
    if (!o->region)
        o->region = getenv(IVSHM_ENV_REGION);
    if (!o->region) {
        fprintf(stderr, "ivshm format: name the region (file:PATH)\n");
        return IVSHM_ERR_INVAL;
    }
    int st = ivshm_format(o->region, &o->fmt);
    if (st != IVSHM_OK)
        return fail("format", st);
    ivshm_region_t *r;
    st = open_region("format", o, IVSHM_OPEN_RDONLY, &r);
    if (st != IVSHM_OK)
        return st;
    ivshm_region_info_t inf;
    ivshm_region_info(r, &inf);
    char u[37];
    ivshm_uuid_str(inf.uuid, u);
    if (o->json) {
        printf("{\"region\":");
        jstr(ivshm_region_uri(r));
        printf(",\"uuid\":\"%s\",\"size\":%llu,\"chunks\":%u,"
               "\"chunk_size\":%u}\n",
               u, (unsigned long long)inf.size, inf.chunk_count,
               inf.chunk_size);
    } else {
        printf("formatted %s: %llu bytes, uuid %s, %u chunks of %u KiB, "
               "%u process slots, %u job slots\n",
               ivshm_region_uri(r), (unsigned long long)inf.size, u,
               inf.chunk_count, inf.chunk_size / 1024, inf.reg_slots,
               inf.job_slots);
    }
    ivshm_region_close(r);
    return 0;
}

static int do_info(struct opts *o)
{
    ivshm_region_t *r;
    int st = open_region("info", o, IVSHM_OPEN_RDONLY, &r);
    if (st != IVSHM_OK)
        return st;
    ivshm_region_info_t inf;
    ivshm_region_info(r, &inf);
    char u[37];
    ivshm_uuid_str(inf.uuid, u);
    time_t ct = (time_t)(inf.created_ns / 1000000000ull);
    char tbuf[64];
    strftime(tbuf, sizeof(tbuf), "%Y-%m-%dT%H:%M:%SZ", gmtime(&ct));
    /* VMs: distinct vm ids among live slots */
    uint64_t vms[256];
    unsigned nvms = 0;
    if (o->json) {
        printf("{\"region\":");
        jstr(ivshm_region_uri(r));
        printf(",\"uuid\":\"%s\",\"version\":%u,\"size\":%llu,"
               "\"created\":\"%s\",\"chunk_size\":%u,\"chunks\":%u,"
               "\"chunks_used\":%u,\"chunks_cooling\":%u,"
               "\"processes_in_doubt\":%u,\"lease_timeout_ms\":%u,"
               "\"memory\":",
               u, inf.version, (unsigned long long)inf.size, tbuf,
               inf.chunk_size, inf.chunk_count, inf.chunks_used,
               inf.chunks_cooling, inf.reg_in_doubt, inf.lease_timeout_ms);
        jstr(ivshm_region_memtype(r));
        printf(",\"processes\":[");
    } else {
        printf("region     %s\nuuid       %s\nversion    %u\nsize       %llu "
               "bytes (%llu MiB)\ncreated    %s\nheap       %u of %u chunks "
               "of %u KiB used (%.1f%%)\nlease      %u ms\n",
               ivshm_region_uri(r), u, inf.version,
               (unsigned long long)inf.size,
               (unsigned long long)(inf.size >> 20), tbuf, inf.chunks_used,
               inf.chunk_count, inf.chunk_size / 1024,
               inf.chunk_count ? 100.0 * inf.chunks_used / inf.chunk_count
                               : 0.0,
               inf.lease_timeout_ms);
        printf("memory     %s\n", ivshm_region_memtype(r));
        printf("cooling    %u chunks (a dead owner's, free after the lease "
               "timeout)\n",
               inf.chunks_cooling);
        printf("processes  %u of %u slots, %u in doubt\n", inf.reg_used,
               inf.reg_slots, inf.reg_in_doubt);
    }
    bool first = true;
    for (uint32_t i = 0; i < inf.reg_slots; i++) {
        ivshm_proc_info_t p;
        if (ivshm_region_proc(r, i, &p) != IVSHM_OK || p.state == 0)
            continue;
        unsigned k;
        for (k = 0; k < nvms && vms[k] != p.vm_id; k++)
            ;
        if (k == nvms && nvms < 256)
            vms[nvms++] = p.vm_id;
        if (o->json) {
            printf("%s{\"slot\":%u,\"gen\":%u,\"state\":\"%s\",\"pid\":%u,"
                   "\"vm\":\"%016llx\",\"host\":",
                   first ? "" : ",", p.slot, p.gen, state_name(p.state), p.pid,
                   (unsigned long long)p.vm_id);
            jstr(p.host);
            printf(",\"comm\":");
            jstr(p.comm);
            printf(",\"heartbeat_age_ms\":%lld,\"jobs\":%u,\"chunks\":%u,"
                   "\"in_doubt\":%s}",
                   (long long)p.heartbeat_age_ms, p.job, p.chunks,
                   p.in_doubt ? "true" : "false");
        } else {
            printf("  slot %-4u %-10s pid %-7u vm %016llx host %-16s %-12s "
                   "heartbeat %lld ms ago, %u chunks%s\n",
                   p.slot, p.in_doubt ? "in-doubt" : state_name(p.state),
                   p.pid, (unsigned long long)p.vm_id, p.host, p.comm,
                   (long long)p.heartbeat_age_ms, p.chunks,
                   p.job ? ", in jobs" : "");
        }
        first = false;
    }
    if (o->json)
        printf("],\"vms\":%u,\"jobs\":[", nvms);
    else
        printf("vms        %u\njobs       %u of %u slots\n", nvms, inf.job_used,
               inf.job_slots);
    first = true;
    for (uint32_t i = 0; i < inf.job_slots; i++) {
        ivshm_job_info_t j;
        if (ivshm_region_job(r, i, &j) != IVSHM_OK || j.state == 0)
            continue;
        if (o->json) {
            printf("%s{\"slot\":%u,\"state\":\"%s\",\"key\":", first ? "" : ",",
                   j.slot, state_name(j.state));
            jstr(j.key);
            printf(",\"area_off\":%llu,\"area_size\":%llu,\"members\":%u}",
                   (unsigned long long)j.area_off,
                   (unsigned long long)j.area_size, j.members);
        } else {
            printf("  job %-4u %-10s %-24s area %llu+%llu, %u members\n",
                   j.slot, state_name(j.state), j.key,
                   (unsigned long long)j.area_off,
                   (unsigned long long)j.area_size, j.members);
        }
        first = false;
    }
    if (o->json)
        printf("]}\n");
    ivshm_region_close(r);
    return 0;
}

static int do_config(struct opts *o)
{
    const ivshm_config_param_t *p;
    if (o->json)
        printf("[");
    else
        printf("| variable | default | range | meaning |\n"
               "| --- | --- | --- | --- |\n");
    for (unsigned i = 0; (p = ivshm_ep_config_param(i)) != NULL; i++) {
        if (o->json) {
            printf("%s{\"env\":\"%s\",\"default\":%u,\"min\":%u,"
                   "\"max\":%u,\"pow2\":%s,\"doc\":",
                   i ? "," : "", p->env, p->def, p->min, p->max,
                   p->pow2 ? "true" : "false");
            jstr(p->doc);
            printf("}");
        } else {
            printf("| `%s` | %u | %u..%u%s | %s |\n", p->env, p->def, p->min,
                   p->max, p->pow2 ? ", power of two" : "", p->doc);
        }
    }
    if (o->json)
        printf("]\n");
    return 0;
}

static int do_list(struct opts *o)
{
    ivshm_pci_dev_t devs[32];
    int n = ivshm_pci_list(devs, 32);
    if (n > 32)
        n = 32;
    if (o->json)
        printf("[");
    else if (n == 0)
        printf("no ivshmem devices (PCI 1af4:1110)\n");
    for (int i = 0; i < n; i++) {
        if (o->json)
            printf("%s{\"uri\":\"pci:%s\",\"size\":%llu,\"revision\":%d,"
                   "\"mode\":\"%s\",\"accessible\":%s,\"driver\":%s%s%s}",
                   i ? "," : "", devs[i].addr,
                   (unsigned long long)devs[i].size, devs[i].revision,
                   devs[i].has_doorbell ? "doorbell" : "plain",
                   devs[i].accessible ? "true" : "false",
                   devs[i].chardev[0] ? "\"dev:" : "",
                   devs[i].chardev[0] ? devs[i].chardev : "null",
                   devs[i].chardev[0] ? "\"" : "");
        else
            printf("pci:%s  %llu MiB  rev %d  %s  %s%s%s\n", devs[i].addr,
                   (unsigned long long)(devs[i].size >> 20), devs[i].revision,
                   devs[i].has_doorbell ? "doorbell" : "plain",
                   devs[i].accessible ? "accessible"
                                      : "no access (see the udev rule)",
                   devs[i].chardev[0] ? "  driver: dev:" : "",
                   devs[i].chardev);
    }
    if (o->json)
        printf("]\n");
    return 0;
}

struct check_ctx {
    bool json;
    unsigned problems, notes;
};

static void check_report(void *arg, ivshm_status_t st, const char *msg)
{
    struct check_ctx *c = arg;
    if (st == IVSHM_OK)
        c->notes++;
    else
        c->problems++;
    if (c->json) {
        printf("%s{\"severity\":\"%s\",\"code\":%d,\"message\":",
               c->problems + c->notes > 1 ? "," : "",
               st == IVSHM_OK ? "note" : "error", (int)st);
        jstr(msg);
        printf("}");
    } else {
        printf("%s: %s\n", st == IVSHM_OK ? "note" : "error", msg);
    }
}

static int do_check(struct opts *o)
{
    ivshm_region_t *r;
    int st = ivshm_region_open(o->region,
                               IVSHM_OPEN_RDONLY | IVSHM_OPEN_NOVALIDATE, &r);
    if (!r)
        return fail("check", st);
    struct check_ctx c = {o->json, 0, 0};
    if (o->json)
        printf("{\"region\":\"%s\",\"findings\":[", ivshm_region_uri(r));
    st = ivshm_region_check(r, check_report, &c);
    if (o->json)
        printf("],\"ok\":%s,\"code\":%d}\n", st == IVSHM_OK ? "true" : "false",
               st);
    else if (st == IVSHM_OK)
        printf("%s: layout valid (%u notes)\n", ivshm_region_uri(r), c.notes);
    else
        fprintf(stderr, "ivshm check: %s: %u problems\n", ivshm_region_uri(r),
                c.problems);
    ivshm_region_close(r);
    return st;
}

struct gc_ctx {
    bool json;
    unsigned n;
};

static void gc_released(void *arg, const ivshm_proc_info_t *p)
{
    struct gc_ctx *c = arg;
    if (c->json)
        printf("%s{\"slot\":%u,\"vm\":\"%016llx\",\"pid\":%u,"
               "\"heartbeat_age_ms\":%lld}",
               c->n ? "," : "", p->slot, (unsigned long long)p->vm_id, p->pid,
               (long long)p->heartbeat_age_ms);
    else
        printf("released lease in doubt: slot %u, vm %016llx, pid %u, "
               "heartbeat %lld ms ago\n",
               p->slot, (unsigned long long)p->vm_id, p->pid,
               (long long)p->heartbeat_age_ms);
    c->n++;
}

static int do_gc(struct opts *o)
{
    ivshm_region_t *r;
    int st = open_region("gc", o, 0, &r);
    if (st != IVSHM_OK)
        return st;
    ivshm_gc_stats_t s;
    struct gc_ctx c = {o->json, 0};
    if (o->json)
        printf("{\"released\":[");
    st = o->force ? ivshm_gc_force(r, gc_released, &c, &s) : ivshm_gc(r, &s);
    if (st != IVSHM_OK) {
        if (o->json)
            printf("]}\n");
        ivshm_region_close(r);
        return fail("gc", st);
    }
    if (o->json)
        printf("],\"processes\":%u,\"jobs\":%u,\"chunks\":%u,"
               "\"in_doubt\":%u}\n",
               s.procs_reclaimed, s.jobs_reclaimed, s.chunks_freed,
               s.procs_in_doubt);
    else
        printf("reclaimed %u process leases, %u jobs, %u chunks\n",
               s.procs_reclaimed, s.jobs_reclaimed, s.chunks_freed);
    if (!o->json && s.procs_in_doubt)
        printf("kept %u leases in doubt (heartbeat older than the lease "
               "timeout, owner in another VM that may be paused); 'ivshm "
               "gc --force' releases them once their VMs are known to be "
               "gone\n",
               s.procs_in_doubt);
    ivshm_region_close(r);
    return 0;
}

struct stat_ctx {
    bool json;
    unsigned n;
};

static void stat_visit(void *arg, const char *job, uint32_t index, uint32_t pid,
                       const ivshm_ep_stats_t *s)
{
    struct stat_ctx *c = arg;
    if (c->json) {
        printf("%s{\"job\":", c->n ? "," : "");
        jstr(job);
        printf(",\"endpoint\":%u,\"pid\":%u,\"msgs_in\":%llu,\"bytes_in\":%llu,"
               "\"msgs_out\":%llu,\"bytes_out\":%llu,\"stalls_full\":%llu,"
               "\"invalid_dropped\":%llu,\"dead_peers\":%llu,"
               "\"fbox_granted\":%llu,\"fbox_used\":%llu,\"wakeups\":%llu}",
               index, pid, (unsigned long long)s->msgs_in,
               (unsigned long long)s->bytes_in, (unsigned long long)s->msgs_out,
               (unsigned long long)s->bytes_out,
               (unsigned long long)s->stalls_full,
               (unsigned long long)s->invalid_dropped,
               (unsigned long long)s->dead_peers,
               (unsigned long long)s->fbox_granted,
               (unsigned long long)s->fbox_used, (unsigned long long)s->wakeups);
    } else {
        printf("%-20s %4u %7u %10llu %12llu %10llu %12llu %7llu %7llu %5llu "
               "%5llu/%-5llu %7llu\n",
               job, index, pid, (unsigned long long)s->msgs_in,
               (unsigned long long)s->bytes_in, (unsigned long long)s->msgs_out,
               (unsigned long long)s->bytes_out,
               (unsigned long long)s->stalls_full,
               (unsigned long long)s->invalid_dropped,
               (unsigned long long)s->dead_peers,
               (unsigned long long)s->fbox_granted,
               (unsigned long long)s->fbox_used, (unsigned long long)s->wakeups);
    }
    c->n++;
}

static int do_stat(struct opts *o)
{
    ivshm_region_t *r;
    int st = open_region("stat", o, IVSHM_OPEN_RDONLY, &r);
    if (st != IVSHM_OK)
        return st;
    struct stat_ctx c = {o->json, 0};
    if (o->json)
        printf("[");
    else
        printf("%-20s %4s %7s %10s %12s %10s %12s %7s %7s %5s %11s %7s\n", "job",
               "ep", "pid", "msgs_in", "bytes_in", "msgs_out", "bytes_out",
               "stalls", "invalid", "dead", "fbox g/u", "wakeups");
    ivshm_region_endpoints(r, stat_visit, &c);
    if (o->json)
        printf("]\n");
    else if (c.n == 0)
        printf("(no channel endpoints)\n");
    ivshm_region_close(r);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {0};
    ivshm_format_opts_init(&o.fmt);
    static const struct option lo[] = {
        {"region", required_argument, 0, 'r'},
        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {"size", required_argument, 0, 's'},
        {"chunk", required_argument, 0, 'c'},
        {"procs", required_argument, 0, 'p'},
        {"jobs", required_argument, 0, 'J'},
        {"lease-ms", required_argument, 0, 'l'},
        {"hugepages", no_argument, 0, 'H'},
        {"force", no_argument, 0, 'f'},
        {"mode", required_argument, 0, 'm'},
        {0, 0, 0, 0},
    };
    const char *cmd = NULL;
    bool help = false;
    int c;
    /* '+' not used: options may come before or after the command */
    while ((c = getopt_long(argc, argv, "r:jhs:fH", lo, NULL)) != -1) {
        uint64_t v;
        switch (c) {
        case 'r': o.region = optarg; break;
        case 'j': o.json = true; break;
        case 'h': help = true; break;
        case 'f': o.fmt.force = 1; o.force = true; break;
        case 'H': o.fmt.hugepages = 1; break;
        case 'm': o.fmt.mode = (mode_t)strtoul(optarg, NULL, 8); break;
        case 's': case 'c': case 'p': case 'J': case 'l':
            if (!parse_size(optarg, &v) || v > UINT64_MAX / 2) {
                fprintf(stderr, "ivshm: bad number '%s'\n", optarg);
                return IVSHM_ERR_INVAL;
            }
            if (c == 's') o.fmt.size = v;
            else if (c == 'c') o.fmt.chunk_size = (uint32_t)v;
            else if (c == 'p') o.fmt.reg_slots = (uint32_t)v;
            else if (c == 'J') o.fmt.job_slots = (uint32_t)v;
            else o.fmt.lease_timeout_ms = (uint32_t)v;
            break;
        default: return usage_main(stderr);
        }
    }
    if (optind < argc)
        cmd = argv[optind++];
    if (optind < argc && !o.region)
        o.region = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "ivshm: unexpected argument '%s'\n", argv[optind]);
        return IVSHM_ERR_INVAL;
    }
    if (!cmd)
        return usage_main(help ? stdout : stderr);
    static const struct {
        const char *name;
        int (*fn)(struct opts *);
    } cmds[] = {{"format", do_format}, {"info", do_info}, {"list", do_list},
                {"check", do_check},   {"gc", do_gc},
                {"stat", do_stat},     {"config", do_config}};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (strcmp(cmd, cmds[i].name) == 0)
            return help ? cmd_usage(cmd, stdout) : cmds[i].fn(&o);
    }
    if (strcmp(cmd, "help") == 0)
        return usage_main(stdout);
    fprintf(stderr, "ivshm: unknown command '%s'\n", cmd);
    return usage_main(stderr);
}
