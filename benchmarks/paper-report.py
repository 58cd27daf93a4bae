#!/usr/bin/env python3
"""Turns paper-eval.sh's CSV files into report.md and PNG plots.

    paper-report.py DIR

Reads DIR/results-*.csv (bench,setup,vms,size,value,unit) and
DIR/machine-*.txt; writes DIR/report.md with ratio tables against native
shared memory (vader) and tcp, the issue's targets marked met or missed, and
DIR/*.png through gnuplot when it is installed. Standard library only.
"""
import csv
import glob
import os
import statistics
import subprocess
import sys

SETUPS = ("ivshmem", "native", "tcp")


def load(d):
    rows = {}
    for f in sorted(glob.glob(os.path.join(d, "results-*.csv"))):
        with open(f) as fh:
            for r in csv.DictReader(fh):
                key = (r["bench"], r["setup"], int(r["vms"]), int(r["size"]))
                rows[key] = (float(r["value"]), r["unit"])
    return rows


def series(rows, bench, setup, vms):
    return {k[3]: v[0] for k, v in rows.items()
            if k[0] == bench and k[1] == setup and k[2] == vms}


def fmt_size(n):
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return str(n)


def ratio(a, b):
    return a / b if a and b else None


def r2(x, nd=2):
    return "-" if x is None else ("%.*f" % (nd, x))


class Report:
    def __init__(self, d, rows):
        self.d, self.rows, self.lines, self.targets = d, rows, [], []

    def out(self, s=""):
        self.lines.append(s)

    def table(self, bench, vms, unit, lower_better=True):
        iv, na, tc = (series(self.rows, bench, s, vms) for s in SETUPS)
        sizes = sorted(set(iv) | set(na) | set(tc))
        if not sizes:
            return None
        self.out("| bytes | ivshmem | native (vader) | tcp | ivshmem / native | %s |" %
                 ("tcp / ivshmem" if lower_better else "ivshmem / tcp"))
        self.out("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for s in sizes:
            a, b, c = iv.get(s), na.get(s), tc.get(s)
            vs_tcp = ratio(c, a) if lower_better else ratio(a, c)
            self.out("| %s | %s | %s | %s | %s | %s |" % (
                fmt_size(s), r2(a), r2(b), r2(c), r2(ratio(a, b)), r2(vs_tcp, 1)))
        self.out()
        return iv, na, tc

    def target(self, what, figure, ok):
        self.targets.append((what, figure, "met" if ok else "**missed**"))


def gnuplot(d, name, title, ylabel, data, logy=True):
    """data: {label: {x: y}}; writes d/name.png if gnuplot exists."""
    if not any(data.values()):
        return None
    try:
        subprocess.run(["gnuplot", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    plots = []
    for label, pts in data.items():
        if not pts:
            continue
        fn = os.path.join(d, ".%s-%s.dat" % (name, label.replace(" ", "_")))
        with open(fn, "w") as fh:
            for x in sorted(pts):
                fh.write("%d %g\n" % (x, pts[x]))
        plots.append("'%s' using 1:2 with linespoints title '%s'" % (fn, label))
    script = "\n".join([
        "set terminal png size 800,520",
        "set output '%s'" % os.path.join(d, name + ".png"),
        "set title '%s'" % title, "set xlabel 'message size (bytes)'",
        "set ylabel '%s'" % ylabel, "set logscale x 2", "set grid",
        "set key top left", "set format x '%.0s%cB'",
        "set logscale y 10" if logy else "",
        "plot " + ", ".join(plots), ""])
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    for fn in glob.glob(os.path.join(d, ".%s-*.dat" % name)):
        os.remove(fn)
    return name + ".png"


def gnuplot_bars(d, name, title, rows_by_setup, labels):
    """stacked compute/comm bars per (vms, setup)."""
    try:
        subprocess.run(["gnuplot", "--version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    fn = os.path.join(d, ".%s.dat" % name)
    with open(fn, "w") as fh:
        for lab, (comp, comm) in zip(labels, rows_by_setup):
            fh.write('"%s" %g %g\n' % (lab, comp * 1e3, comm * 1e3))
    script = "\n".join([
        "set terminal png size 900,520",
        "set output '%s'" % os.path.join(d, name + ".png"),
        "set title '%s'" % title, "set ylabel 'ms per iteration'",
        "set style data histograms", "set style histogram rowstacked",
        "set style fill solid 0.8 border -1", "set boxwidth 0.7",
        "set xtics rotate by -40", "set grid y",
        "plot '%s' using 2:xtic(1) title 'compute', '' using 3 title 'communication'" % fn,
        ""])
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.remove(fn)
    return name + ".png"


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    rows = load(d)
    if not rows:
        print("paper-report: no results in %s" % d, file=sys.stderr)
        return 1
    rep = Report(d, rows)
    vms_all = sorted({k[2] for k in rows if k[0].startswith(("bcast", "allgather",
                                                             "allreduce", "alltoall", "app-"))})
    vmax = max(vms_all) if vms_all else 2
    pngs = []

    rep.out("## Two-sided, 2 VMs")
    for bench, unit, lower in (("latency", "us", True), ("bw", "MB/s", False)):
        if not any(k[0] == bench for k in rows):
            continue
        rep.out("### %s (%s)" % (bench, unit))
        iv, na, tc = rep.table(bench, 2, unit, lower)
        pngs.append(gnuplot(d, bench, "%s, 2 VMs" % bench, unit,
                            {"ivshmem": iv, "native (vader)": na, "tcp": tc},
                            logy=True))
        if bench == "latency":
            for s in (4, 8):
                if s in iv and s in na and s in tc:
                    rep.out("At %d bytes: ivshmem %.2f us, native %.2f us, tcp %.2f us "
                            "(paper at 4 bytes: 0.22 us IVShmem, 1.2 us SR-IOV)." %
                            (s, iv[s], na[s], tc[s]))
                    rep.out()
                    break
        else:
            if iv and tc:
                peak = max(iv.values())
                rep.out("Peak: ivshmem %.0f MB/s, native %.0f MB/s, tcp %.0f MB/s: "
                        "ivshmem is %+.0f %% against tcp (paper: +158 %% against SR-IOV)." %
                        (peak, max(na.values()) if na else 0, max(tc.values()),
                         (peak / max(tc.values()) - 1) * 100))
                rep.out()

    mlat = [k for k in rows if k[0] == "mlat"]
    if mlat:
        pairs = mlat[0][2] // 2
        rep.out("## Multi-pair latency, %d pairs (us)" % pairs)
        rep.table("mlat", pairs * 2, "us")

    if any(k[0] in ("put", "get", "putbw", "getbw") for k in rows):
        rep.out("## One-sided, 2 VMs (osc pt2pt over the BTLs)")
    for bench, unit, lower in (("put", "us", True), ("get", "us", True),
                               ("putbw", "MB/s", False), ("getbw", "MB/s", False)):
        if any(k[0] == bench for k in rows):
            rep.out("### %s (%s)" % (bench, unit))
            iv, na, tc = rep.table(bench, 2, unit, lower)
            pngs.append(gnuplot(d, bench, "%s, 2 VMs" % bench, unit,
                                {"ivshmem": iv, "native (vader)": na, "tcp": tc}))

    colls = [b for b in ("barrier", "bcast", "reduce", "allreduce", "allgather", "alltoall")
             if any(k[0] == b for k in rows)]
    if colls:
        rep.out("## Collectives (us per operation)")
        rep.out("Worst and median ratio over the sizes measured (up to 64 KiB), per VM count.")
        rep.out()
        rep.out("| collective | VMs | ivshmem / native: worst | median | "
                "tcp / ivshmem, sizes <= 1 KiB: worst | up to (time saved vs tcp) |")
        rep.out("| --- | ---: | ---: | ---: | ---: | ---: |")
        for b in colls:
            for v in vms_all:
                iv, na, tc = (series(rows, b, s, v) for s in SETUPS)
                rn = [iv[s] / na[s] for s in iv if s in na and na[s] > 0 and s <= 65536]
                rt = [tc[s] / iv[s] for s in iv if s in tc and iv[s] > 0 and s <= 1024]
                saved = [1 - iv[s] / tc[s] for s in iv if s in tc and tc[s] > 0]
                if not rn:
                    continue
                rep.out("| %s | %d | %.2f | %.2f | %s | %s |" % (
                    b, v, max(rn), statistics.median(rn), r2(min(rt) if rt else None, 1),
                    "%.0f %%" % (max(saved) * 100) if saved else "-"))
                if v == vmax:
                    # the targets: coll ivshmem beats native, alltoall matches it
                    bound = 1.0 if b == "alltoall" else 0.8
                    rep.target("%s at %d VMs, <= 64 KiB: ivshmem <= %.1fx native" % (b, v, bound),
                               "worst %.2fx" % max(rn), max(rn) <= bound)
                    if rt:
                        rep.target("%s at %d VMs, <= 1 KiB: >= 3x faster than tcp" % (b, v),
                                   "worst %.1fx" % min(rt), min(rt) >= 3)
        rep.out()
        for b in colls:
            rep.out("### %s at %d VMs (us)" % (b, vmax))
            iv, na, tc = rep.table(b, vmax, "us")
            if b != "barrier":  # one figure, no size axis
                pngs.append(gnuplot(d, b, "%s, %d VMs" % (b, vmax), "us",
                                    {"ivshmem": iv, "native (vader)": na, "tcp": tc}))

    apps = sorted({k[0].split("-")[1] for k in rows if k[0].startswith("app-")})
    if apps:
        rep.out("## Application kernel (ms per iteration, slowest rank)")
        rep.out("| kernel | VMs | setup | total | compute | communication | comm / native comm |")
        rep.out("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
        for k in apps:
            bars, labels = [], []
            for v in vms_all:
                get = lambda part, s: rows.get(("app-%s-%s" % (k, part), s, v, 0), (None,))[0]
                ncomm = get("comm", "native")
                for s in SETUPS:
                    tot, comp, comm = get("total", s), get("compute", s), get("comm", s)
                    if tot is None:
                        continue
                    rep.out("| %s | %d | %s | %.3f | %.3f | %.3f | %s |" % (
                        k, v, s, tot * 1e3, comp * 1e3, comm * 1e3, r2(ratio(comm, ncomm))))
                    bars.append((comp, comm))
                    labels.append("%d %s" % (v, s))
                c_iv = get("comm", "ivshmem")
                if v in (8, 15) and c_iv is not None and ncomm:
                    rep.target("%s at %d VMs: communication within 1.2x native" % (k, v),
                               "%.2fx" % (c_iv / ncomm), c_iv / ncomm <= 1.2)
            pngs.append(gnuplot_bars(d, "app-" + k, "%s: compute and communication" % k,
                                     bars, labels))
        rep.out()

    machine = []
    for f in sorted(glob.glob(os.path.join(d, "machine-*.txt"))):
        with open(f) as fh:
            machine.append(fh.read().strip())
    head = ["# Inter-VM shared memory vs native and network: the paper's evaluation",
            "",
            "Reproduces the dimensions of Zhang et al., Euro-Par 2014 (two-sided, "
            "multi-pair, one-sided, collectives, an application kernel, VM scaling) "
            "on libivshm's BTL. Every ratio compares transports measured in the same "
            "run: ivshmem (one rank per VM), native (Open MPI vader, all ranks in one "
            "VM) and tcp (one rank per VM). Values are medians of repeated runs.",
            "", "## Machine and command", "", "```"] + machine + ["```", ""]
    if rep.targets:
        head += ["## Targets", "", "| target | figure | |", "| --- | --- | --- |"]
        head += ["| %s | %s | %s |" % t for t in rep.targets]
        head += [""]
    plots = [p for p in pngs if p]
    if plots:
        rep.out("## Plots")
        for p in plots:
            rep.out("![%s](%s)" % (p[:-4], p))
    with open(os.path.join(d, "report.md"), "w") as fh:
        fh.write("\n".join(head + rep.lines) + "\n")
    missed = sum(1 for t in rep.targets if t[2] != "met")
    print("paper-report: %s/report.md, %d plots, %d of %d targets met" %
          (d, len(plots), len(rep.targets) - missed, len(rep.targets)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
