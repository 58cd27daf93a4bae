#!/usr/bin/env python3
"""Mutation checks: small, realistic bugs that the tests must catch.

Every file named MUTATIONS in the tree lists bugs for the code beside it.
This script copies the tree (the files git tracks, as they are in the
working tree) to a scratch folder, builds it once, and then, one mutation
at a time, puts the bug in, rebuilds and runs the tests the mutation names.
A mutation is caught when one of those tests fails; it survives when they
all pass. Every mutation must be caught: a survivor is a missing test. A
mutation that does not build is a broken entry (the bug must be one the
compiler lets through), and a test that skips (exit 77) cannot judge:
either fails the run.
Tests run one by one, straight from the build tree (a test program, or a
test script with top_builddir and top_srcdir set, as make check sets
them), without make check's ordering of the simulated-VM and guest tests. The script prints one line per mutation and a summary
`mutations: N caught, N survived`, and exits 1 when any survived.

    scripts/mutate.py [--list] [--keep] [--only NAME ...] [--timeout S]

A MUTATIONS file holds entries of this form (blank lines and lines starting
with '#' between entries are ignored):

    [name]
    file = chan_send.c                  (relative to the MUTATIONS file)
    tests = tests/unit/test_chan tests/mp/test_chan_kill
    why = what the bug is
    - the original line(s), each after "- "
    + the buggy line(s), each after "+ " (none: the lines are removed)

The original lines must occur exactly once in the file, so that a change
to the code that moves them away makes the entry fail loudly instead of
silently testing nothing.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TOOL = "libivshm/tools/ivshm"  # run by test programs as well as scripts


class Mutation:
    def __init__(self, name, where):
        self.name = name
        self.where = where  # "path:line" of the entry, for messages
        self.file = None
        self.tests = []
        self.why = ""
        self.old = []
        self.new = []


def parse(path):
    """The entries of one MUTATIONS file."""
    rel_dir = os.path.dirname(os.path.relpath(path, TOP))
    out, cur = [], None
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            where = "%s:%d" % (os.path.relpath(path, TOP), n)
            if line.startswith("[") and line.endswith("]"):
                cur = Mutation(line[1:-1].strip(), where)
                out.append(cur)
            elif line.startswith("- ") or line == "-":
                cur.old.append(line[2:])
            elif line.startswith("+ ") or line == "+":
                cur.new.append(line[2:])
            elif cur is not None and "=" in line and not line.startswith("#"):
                key, val = (s.strip() for s in line.split("=", 1))
                if key == "file":
                    cur.file = os.path.join(rel_dir, val)
                elif key == "tests":
                    cur.tests = val.split()
                elif key == "why":
                    cur.why = val
                else:
                    sys.exit("%s: unknown key %r" % (where, key))
            elif line.strip() and not line.startswith("#"):
                sys.exit("%s: cannot read %r" % (where, line))
    for m in out:
        if not (m.file and m.tests and m.old):
            sys.exit("%s: [%s] needs file, tests and '- ' lines"
                     % (m.where, m.name))
    return out


def all_mutations():
    files = subprocess.run(["git", "ls-files", "*MUTATIONS"], cwd=TOP,
                           capture_output=True, text=True, check=True)
    muts = []
    for rel in sorted(files.stdout.split()):
        muts += parse(os.path.join(TOP, rel))
    names = [m.name for m in muts]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        sys.exit("mutate: names used twice: %s" % " ".join(sorted(dup)))
    return muts


def apply(src, m):
    """Puts the bug into the copy; returns the original text."""
    path = os.path.join(src, m.file)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    old = "\n".join(m.old) + "\n"
    new = "\n".join(m.new) + "\n" if m.new else ""
    count = text.count(old)
    if count != 1:
        raise LookupError("%s: the original lines occur %d times in %s"
                          % (m.where, count, m.file))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))
    return text


def restore(src, m, text):
    path = os.path.join(src, m.file)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    # a new mtime (now: later than what was built from the bug), so that
    # make rebuilds what depends on it
    os.utime(path, None)


def sh(cmd, cwd, log, timeout=None):
    with open(log, "a", encoding="utf-8") as out:
        out.write("$ %s\n" % cmd)
        out.flush()
        # its own process group: a test cut off by the timeout goes with
        # everything it started (mpirun, ranks), before the next mutation
        p = subprocess.Popen(cmd, shell=True, cwd=cwd, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            out.write("mutate: timed out after %s s\n" % timeout)
            return 124


def build_for(build, tests, jobs, log):
    """Builds what the tests run: a test script runs the installed parts
    (the component, the tools), so everything is built first; test
    programs are built on their own, with what they link and nothing else
    (most mutations name only programs, and the components and guest
    programs took most of their time). A program may run the `ivshm` tool
    (test_lifetimes runs `ivshm gc`), so the tool is built with them. One
    make at a time: two goals of one make race on the same objects."""
    progs = [t for t in tests if not t.endswith(".sh")]
    if len(progs) < len(tests):
        rc = sh("make -j%d" % jobs, build, log)
        if rc or not progs:
            return rc
    else:
        progs.append(TOOL)
    return sh("make -j%d %s" % (jobs, " ".join(progs)), build, log)


def remove_left_regions():
    """The region files of tests that ended without their clean-up (a
    program stopped at its first failure skips its teardown; a script cut
    off by the timeout, its exit trap): tests/testutil.h names them
    /dev/shm/ivshm-test-PID-..., test_qemu_mpi.sh ivshm-qemu-mpi-PID.X,
    ivshm-lat/ivshm-bw (test_bench_args.sh) ivshm-bench-PID. A
    live PID's are left alone."""
    for name in os.listdir("/dev/shm"):
        for prefix in ("ivshm-test-", "ivshm-qemu-mpi-", "ivshm-bench-"):
            if not name.startswith(prefix):
                continue
            pid = name[len(prefix):].replace(".", "-").split("-")[0]
            if pid.isdigit() and not os.path.exists("/proc/%s" % pid):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass


def run_tests(src, build, tests, log, timeout):
    """0 when every test passes; else the first failing status. A cmocka
    program stops at its first failure (CMOCKA_TEST_ABORT): the verdict is
    the same, and the rest of its tests, some of which wait out their
    bounds once a bug is in, need not run."""
    for t in tests:
        if t.endswith(".sh"):
            cmd = "top_builddir=%s top_srcdir=%s sh %s/%s" % (build, src, src, t)
        else:
            cmd = "ulimit -c 0; CMOCKA_TEST_ABORT=1 %s/%s" % (build, t)
        rc = sh(cmd, build, log, timeout)
        if rc:
            remove_left_regions()
            return rc
    return 0


def copy_tree(dst):
    files = subprocess.run(["git", "ls-files", "-z"], cwd=TOP,
                           capture_output=True, check=True).stdout
    for rel in files.decode().split("\0"):
        if not rel or not os.path.lexists(os.path.join(TOP, rel)):
            continue
        os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(os.path.join(TOP, rel), os.path.join(dst, rel),
                     follow_symlinks=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true",
                    help="list the mutations and check they apply")
    ap.add_argument("--only", nargs="+", default=[], help="these names only")
    ap.add_argument("--keep", action="store_true",
                    help="keep the scratch folder (its path is printed)")
    ap.add_argument("--timeout", type=int, default=600,
                    help="seconds for one mutation's tests (default 600)")
    args = ap.parse_args()
    muts = all_mutations()
    if args.only:
        unknown = set(args.only) - {m.name for m in muts}
        if unknown:
            sys.exit("mutate: no mutation named %s" % " ".join(unknown))
        muts = [m for m in muts if m.name in args.only]
    work = tempfile.mkdtemp(prefix="ivshm-mutate.")
    src, build = os.path.join(work, "src"), os.path.join(work, "build")
    log = os.path.join(work, "mutate.log")
    copy_tree(src)
    bad = 0
    for m in muts:  # every entry must apply before anything is built
        try:
            restore(src, m, apply(src, m))
        except LookupError as e:
            print("mutate: %s" % e)
            bad += 1
    if bad or args.list:
        for m in muts:
            print("%-28s %-40s %s" % (m.name, m.file, " ".join(m.tests)))
        shutil.rmtree(work)
        return 1 if bad else 0
    os.makedirs(build)
    jobs = os.cpu_count() or 2
    print("mutate: building a copy in %s (log %s)" % (work, log), flush=True)
    # shared objects only: each object is compiled once, not twice (the
    # guests' static programs link the convenience library all the same);
    # no link-time optimisation: a mutant's component links in seconds
    if (sh("autoreconf -fi", src, log) or
            sh("%s/configure --disable-static --disable-lto CFLAGS='-O1 -g'" % src,
               build, log)):
        print("mutate: the unmutated copy does not configure (%s)" % log)
        return 1
    tests = sorted({t for m in muts for t in m.tests})
    start = time.time()
    if (build_for(build, tests, jobs, log) or
            run_tests(src, build, tests, log, args.timeout)):
        print("mutate: the unmutated copy does not build or fails its tests "
              "(%s)" % log)
        return 1
    print("mutate: the unmutated copy passes its %d tests (%.0f s)"
          % (len(tests), time.time() - start), flush=True)
    caught, survived, broken = 0, [], []
    for m in muts:
        text = apply(src, m)
        t0 = time.time()
        if build_for(build, m.tests, jobs, log):
            restore(src, m, text)
            broken.append(m)
            print("BROKEN    %-28s does not build (%s)" % (m.name, log),
                  flush=True)
            continue
        rc = run_tests(src, build, m.tests, log, args.timeout)
        how = "timed out" if rc == 124 else "tests fail"
        restore(src, m, text)
        took = time.time() - t0
        if rc == 77:
            survived.append(m)
            print("SKIPPED   %-28s a test skipped: it cannot judge" % m.name,
                  flush=True)
        elif rc:
            caught += 1
            print("caught    %-28s %s (%.0f s)" % (m.name, how, took),
                  flush=True)
        else:
            survived.append(m)
            print("SURVIVED  %-28s %s passed: %s" % (m.name,
                  " ".join(m.tests), m.why), flush=True)
    print("mutations: %d caught, %d survived%s, in %.0f s" % (
        caught, len(survived),
        ", %d do not build" % len(broken) if broken else "",
        time.time() - start))
    if args.keep:
        # the built parts without the last bug (test programs are rebuilt
        # when make next builds them)
        sh("make -j%d" % jobs, build, log)
        print("mutate: kept %s" % work)
    else:
        shutil.rmtree(work)
    return 1 if survived or broken else 0


if __name__ == "__main__":
    sys.exit(main())
