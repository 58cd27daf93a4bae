/* Collectives, checked value by value against what each rank computes on
 * its own: every predefined datatype/operation pair of MPI's reductions,
 * in place and not, counts 0, 1, odd and larger than a slot (several
 * steps), a non-commutative user operation (rank order), broadcast from
 * every root with contiguous and strided types, allgather and alltoall
 * (in place too), the barrier's ordering, each collective as the first
 * on a communicator, a communicator freed while a rank is behind, and the
 * same on sub-communicators (split, dup, ranks reversed).
 *
 *   mpi_coll [quick]          quick: fewer sizes (2-core CI machines)
 *   mpi_coll loop SECONDS     allreduce in a loop (the fault test kills a
 *                             rank meanwhile)
 *   mpi_coll bcasts           a 64 KiB broadcast from rank 0, a 64-byte one,
 *                             ten more of 64 KiB; each rank prints its
 *                             verdict at once (no collective vouches for
 *                             another)
 *   mpi_coll bcasts pause FILE  the same from rank 1, after one broadcast
 *                             that sets the area up: rank 0 then stops
 *                             itself (SIGSTOP, for the test to resume) and
 *                             the others start once FILE exists
 *
 * The tally goes through point-to-point messages only, so that a broken
 * collective cannot vouch for itself. Prints "N ranks: P passed, F failed".
 */
#include <complex.h>
#include <signal.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int wrank, wsize, passed, failed, quick;

/* a check holds when it holds on every rank of MPI_COMM_WORLD */
static void check(int ok, const char *what)
{
    int all = ok;
    if (wrank == 0) {
        for (int i = 1; i < wsize; i++) {
            int v;
            MPI_Recv(&v, 1, MPI_INT, i, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            all = all && v;
        }
        for (int i = 1; i < wsize; i++)
            MPI_Send(&all, 1, MPI_INT, i, 78, MPI_COMM_WORLD);
    } else {
        MPI_Send(&ok, 1, MPI_INT, 0, 77, MPI_COMM_WORLD);
        MPI_Recv(&all, 1, MPI_INT, 0, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    if (all)
        passed++;
    else
        failed++;
    if (wrank == 0 && !all)
        printf("mpi_coll: FAILED %s\n", what);
}

/* ---- reductions over predefined pairs ---- */

/* input element i of rank r: small, so that sums stay exact; products
 * take 1 or 2 (exact in float at 15 ranks, whatever the order) */
static int for_prod;
static long val(int r, long i)
{
    return for_prod ? (r + i) % 2 + 1 : (r * 7 + i * 3) % 5 + 1;
}

/* What a type is, for MPI's table of which operations apply to it. */
enum cls { C_INT = 1, F_INT = 2, BYTE = 4, FLT = 8, CPLX = 16, BOOL = 32, PAIR = 64 };
/* how one element is stored and compared */
enum store { S_I8, S_I16, S_I32, S_I64, S_F, S_D, S_LD, S_CF, S_CD, S_CLD,
             S_BOOL, S_P2INT, S_PFI, S_PDI, S_PLI, S_PSI, S_PLDI };
struct dtype {
    MPI_Datatype dt;
    const char *name;
    size_t size; /* extent: elements' stride */
    enum cls cls;
    enum store st;
};

#define PAIR_OF(T) struct { T v; int i; }
typedef PAIR_OF(float) p_fi;
typedef PAIR_OF(double) p_di;
typedef PAIR_OF(long) p_li;
typedef PAIR_OF(short) p_si;
typedef PAIR_OF(long double) p_ldi;

static void put(const struct dtype *d, void *buf, long i, long v)
{
    char *p = (char *)buf + i * (long)d->size;
    memset(p, 0, d->size);
    switch (d->st) {
    case S_I8: *(int8_t *)p = (int8_t)v; break;
    case S_I16: *(int16_t *)p = (int16_t)v; break;
    case S_I32: *(int32_t *)p = (int32_t)v; break;
    case S_I64: *(int64_t *)p = (int64_t)v; break;
    case S_F: *(float *)p = (float)v; break;
    case S_D: *(double *)p = (double)v; break;
    case S_LD: *(long double *)p = (long double)v; break;
    case S_CF: *(float complex *)p = (float)v + 1.0f * I; break;
    case S_CD: *(double complex *)p = (double)v + 1.0 * I; break;
    case S_CLD: *(long double complex *)p = (long double)v + 1.0L * I; break;
    case S_BOOL: *(_Bool *)p = v & 1; break;
    /* pairs: the value, and an index that ties break on */
    case S_P2INT: ((int *)p)[0] = (int)v; ((int *)p)[1] = (int)(i % 3); break;
    case S_PFI: ((p_fi *)p)->v = (float)v; ((p_fi *)p)->i = (int)(i % 3); break;
    case S_PDI: ((p_di *)p)->v = (double)v; ((p_di *)p)->i = (int)(i % 3); break;
    case S_PLI: ((p_li *)p)->v = v; ((p_li *)p)->i = (int)(i % 3); break;
    case S_PSI: ((p_si *)p)->v = (short)v; ((p_si *)p)->i = (int)(i % 3); break;
    case S_PLDI: ((p_ldi *)p)->v = v; ((p_ldi *)p)->i = (int)(i % 3); break;
    }
}

/* element i equal in a and b (values, not padding) */
static int same(const struct dtype *d, const void *a, const void *b, long i)
{
    const char *x = (const char *)a + i * (long)d->size;
    const char *y = (const char *)b + i * (long)d->size;
#define EQ(T, f) (((const T *)x)->f == ((const T *)y)->f)
    switch (d->st) {
    case S_LD: return *(const long double *)x == *(const long double *)y;
    case S_CLD: return *(const long double complex *)x == *(const long double complex *)y;
    case S_BOOL: return *(const _Bool *)x == *(const _Bool *)y;
    case S_PFI: return EQ(p_fi, v) && EQ(p_fi, i);
    case S_PDI: return EQ(p_di, v) && EQ(p_di, i);
    case S_PLI: return EQ(p_li, v) && EQ(p_li, i);
    case S_PSI: return EQ(p_si, v) && EQ(p_si, i);
    case S_PLDI: return EQ(p_ldi, v) && EQ(p_ldi, i);
    default: return memcmp(x, y, d->size) == 0;
    }
#undef EQ
}

/* expected = fold over ranks, computed with MPI_Reduce_local (the
 * reference arithmetic), in rank order */
static void expected(const struct dtype *d, MPI_Op op, int n, long count,
                     void *out)
{
    void *tmp = malloc((size_t)count * d->size + 1);
    for (long i = 0; i < count; i++)
        put(d, out, i, val(n - 1, i));
    for (int r = n - 2; r >= 0; r--) {
        for (long i = 0; i < count; i++)
            put(d, tmp, i, val(r, i));
        MPI_Reduce_local(tmp, out, (int)count, d->dt, op);
    }
    free(tmp);
}

static void reductions(MPI_Comm comm, const char *cname)
{
    struct dtype types[] = {
        {MPI_CHAR, "char", 1, C_INT, S_I8},
        {MPI_SIGNED_CHAR, "signed char", 1, C_INT, S_I8},
        {MPI_UNSIGNED_CHAR, "unsigned char", 1, C_INT, S_I8},
        {MPI_SHORT, "short", 2, C_INT, S_I16},
        {MPI_UNSIGNED_SHORT, "unsigned short", 2, C_INT, S_I16},
        {MPI_INT, "int", 4, C_INT, S_I32},
        {MPI_UNSIGNED, "unsigned", 4, C_INT, S_I32},
        {MPI_LONG, "long", 8, C_INT, S_I64},
        {MPI_UNSIGNED_LONG, "unsigned long", 8, C_INT, S_I64},
        {MPI_LONG_LONG, "long long", 8, C_INT, S_I64},
        {MPI_UNSIGNED_LONG_LONG, "unsigned long long", 8, C_INT, S_I64},
        {MPI_INT8_T, "int8_t", 1, C_INT, S_I8},
        {MPI_UINT8_T, "uint8_t", 1, C_INT, S_I8},
        {MPI_INT16_T, "int16_t", 2, C_INT, S_I16},
        {MPI_UINT16_T, "uint16_t", 2, C_INT, S_I16},
        {MPI_INT32_T, "int32_t", 4, C_INT, S_I32},
        {MPI_UINT32_T, "uint32_t", 4, C_INT, S_I32},
        {MPI_INT64_T, "int64_t", 8, C_INT, S_I64},
        {MPI_UINT64_T, "uint64_t", 8, C_INT, S_I64},
        {MPI_AINT, "MPI_Aint", 8, C_INT, S_I64},
        {MPI_OFFSET, "MPI_Offset", 8, C_INT, S_I64},
        {MPI_COUNT, "MPI_Count", 8, C_INT, S_I64},
        {MPI_INTEGER, "Fortran INTEGER", 4, F_INT, S_I32},
        {MPI_BYTE, "byte", 1, BYTE, S_I8},
        {MPI_FLOAT, "float", 4, FLT, S_F},
        {MPI_DOUBLE, "double", 8, FLT, S_D},
        {MPI_LONG_DOUBLE, "long double", sizeof(long double), FLT, S_LD},
        {MPI_REAL, "Fortran REAL", 4, FLT, S_F},
        {MPI_DOUBLE_PRECISION, "Fortran DOUBLE PRECISION", 8, FLT, S_D},
        {MPI_C_FLOAT_COMPLEX, "float complex", 8, CPLX, S_CF},
        {MPI_C_DOUBLE_COMPLEX, "double complex", 16, CPLX, S_CD},
        {MPI_C_LONG_DOUBLE_COMPLEX, "long double complex",
         sizeof(long double complex), CPLX, S_CLD},
        {MPI_C_BOOL, "bool", 1, BOOL, S_BOOL},
        {MPI_2INT, "2int", 8, PAIR, S_P2INT},
        {MPI_FLOAT_INT, "float+int", sizeof(p_fi), PAIR, S_PFI},
        {MPI_DOUBLE_INT, "double+int", sizeof(p_di), PAIR, S_PDI},
        {MPI_LONG_INT, "long+int", sizeof(p_li), PAIR, S_PLI},
        {MPI_SHORT_INT, "short+int", sizeof(p_si), PAIR, S_PSI},
        {MPI_LONG_DOUBLE_INT, "long double+int", sizeof(p_ldi), PAIR, S_PLDI},
    };
    /* which classes each operation applies to (MPI 4.0, 6.9.2) */
    struct {
        MPI_Op op;
        const char *name;
        unsigned classes;
    } ops[] = {
        {MPI_SUM, "sum", C_INT | F_INT | FLT | CPLX},
        {MPI_PROD, "prod", C_INT | F_INT | FLT | CPLX},
        {MPI_MAX, "max", C_INT | F_INT | FLT},
        {MPI_MIN, "min", C_INT | F_INT | FLT},
        {MPI_LAND, "land", C_INT | BOOL},
        {MPI_LOR, "lor", C_INT | BOOL},
        {MPI_LXOR, "lxor", C_INT | BOOL},
        {MPI_BAND, "band", C_INT | F_INT | BYTE},
        {MPI_BOR, "bor", C_INT | F_INT | BYTE},
        {MPI_BXOR, "bxor", C_INT | F_INT | BYTE},
        {MPI_MAXLOC, "maxloc", PAIR},
        {MPI_MINLOC, "minloc", PAIR},
    };
    long counts_full[] = {0, 1, 7, 1001, 70001};
    long counts_quick[] = {0, 1, 7, 1001, 20001};
    long *counts = quick ? counts_quick : counts_full;
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    int ntypes = (int)(sizeof(types) / sizeof(types[0]));
    int nops = (int)(sizeof(ops) / sizeof(ops[0]));
    for (int c = 0; c < 5; c++) {
        long count = counts[c];
        size_t bytes = (size_t)count * 32 + 32;
        char *in = malloc(bytes), *out = malloc(bytes), *want = malloc(bytes);
        int ok_all = 1, ok_inplace = 1, ok_reduce = 1, ok_reduce_ip = 1;
        char first_bad[160] = "";
        for (int t = 0; t < ntypes; t++)
            for (int o = 0; o < nops; o++) {
                const struct dtype *d = &types[t];
                if (!(ops[o].classes & d->cls))
                    continue;
                /* products of up to 15 ranks overflow the small types:
                 * the reference wraps the same way, but keep floats exact */
                for_prod = ops[o].op == MPI_PROD;
                expected(d, ops[o].op, n, count, want);
                for (long i = 0; i < count; i++)
                    put(d, in, i, val(r, i));
                memset(out, 0xa5, bytes);
                MPI_Allreduce(in, out, (int)count, d->dt, ops[o].op, comm);
                int ok = 1;
                for (long i = 0; i < count && ok; i++)
                    ok = same(d, out, want, i);
                if (!ok && !first_bad[0])
                    snprintf(first_bad, sizeof(first_bad), "allreduce %s %s",
                             d->name, ops[o].name);
                ok_all &= ok;
                /* in place */
                memcpy(out, in, (size_t)count * d->size);
                MPI_Allreduce(MPI_IN_PLACE, out, (int)count, d->dt,
                              ops[o].op, comm);
                ok = 1;
                for (long i = 0; i < count && ok; i++)
                    ok = same(d, out, want, i);
                if (!ok && !first_bad[0])
                    snprintf(first_bad, sizeof(first_bad),
                             "allreduce in place %s %s", d->name, ops[o].name);
                ok_inplace &= ok;
                /* reduce to a root that moves with the pair */
                int root = (t + o) % n;
                memset(out, 0xa5, bytes);
                MPI_Reduce(in, r == root ? out : NULL, (int)count, d->dt,
                           ops[o].op, root, comm);
                ok = 1;
                for (long i = 0; r == root && i < count && ok; i++)
                    ok = same(d, out, want, i);
                ok_reduce &= ok;
                if (r == root)
                    memcpy(out, in, (size_t)count * d->size);
                MPI_Reduce(r == root ? MPI_IN_PLACE : in, r == root ? out : NULL,
                           (int)count, d->dt, ops[o].op, root, comm);
                ok = 1;
                for (long i = 0; r == root && i < count && ok; i++)
                    ok = same(d, out, want, i);
                ok_reduce_ip &= ok;
            }
        char what[300];
        snprintf(what, sizeof(what), "%s: allreduce, every pair, count %ld%s%s",
                 cname, count, first_bad[0] ? ": first wrong: " : "", first_bad);
        check(ok_all, what);
        snprintf(what, sizeof(what), "%s: allreduce in place, count %ld", cname, count);
        check(ok_inplace, what);
        snprintf(what, sizeof(what), "%s: reduce, every pair, count %ld", cname, count);
        check(ok_reduce, what);
        snprintf(what, sizeof(what), "%s: reduce in place, count %ld", cname, count);
        check(ok_reduce_ip, what);
        free(in);
        free(out);
        free(want);
    }
}

/* 2x2 integer matrices (mod 1000003) multiplied: order matters */
static void matmul(void *invec, void *inoutvec, int *len, MPI_Datatype *dt)
{
    (void)dt;
    long *a = invec, *b = inoutvec;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        long c[4] = {(a[0] * b[0] + a[1] * b[2]) % 1000003,
                     (a[0] * b[1] + a[1] * b[3]) % 1000003,
                     (a[2] * b[0] + a[3] * b[2]) % 1000003,
                     (a[2] * b[1] + a[3] * b[3]) % 1000003};
        memcpy(b, c, sizeof(c));
    }
}

static void mat_of(int r, long i, long m[4])
{
    m[0] = r + 1;
    m[1] = (i + r) % 7;
    m[2] = (r * 3 + i) % 5;
    m[3] = 2;
}

static void noncommutative(MPI_Comm comm, const char *cname)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    MPI_Datatype mat;
    MPI_Type_contiguous(4, MPI_LONG, &mat);
    MPI_Type_commit(&mat);
    MPI_Op op;
    MPI_Op_create(matmul, 0, &op);
    long sizes[] = {1, 5, quick ? 3000 : 9000}; /* 9000 x 32 B: steps */
    for (int s = 0; s < 3; s++) {
        long cnt = sizes[s];
        long *in = malloc((size_t)cnt * 32), *out = malloc((size_t)cnt * 32),
             *want = malloc((size_t)cnt * 32);
        for (long i = 0; i < cnt; i++) {
            mat_of(r, i, in + 4 * i);
            long acc[4];
            mat_of(n - 1, i, acc);
            for (int q = n - 2; q >= 0; q--) {
                long mq[4];
                int one = 1;
                mat_of(q, i, mq);
                matmul(mq, acc, &one, NULL); /* acc = m_q * acc */
            }
            memcpy(want + 4 * i, acc, sizeof(acc));
        }
        MPI_Allreduce(in, out, (int)cnt, mat, op, comm);
        char what[200];
        snprintf(what, sizeof(what),
                 "%s: allreduce with a non-commutative op keeps rank order (%ld)",
                 cname, cnt);
        check(memcmp(out, want, (size_t)cnt * 32) == 0, what);
        memset(out, 0, (size_t)cnt * 32);
        MPI_Reduce(in, out, (int)cnt, mat, op, n - 1, comm);
        snprintf(what, sizeof(what),
                 "%s: reduce with a non-commutative op keeps rank order (%ld)",
                 cname, cnt);
        check(r != n - 1 || memcmp(out, want, (size_t)cnt * 32) == 0, what);
        free(in);
        free(out);
        free(want);
    }
    MPI_Op_free(&op);
    MPI_Type_free(&mat);
}

/* ---- data movement ---- */

static unsigned char pat(int a, int b, long i)
{
    return (unsigned char)(a * 31 + b * 17 + i * 13 + (i >> 8));
}

static void movement(MPI_Comm comm, const char *cname)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    long sizes_full[] = {0, 1, 7, 1000, 4096, 65536, 300001};
    long sizes_quick[] = {0, 1, 7, 1000, 65536, 140001};
    long *sizes = quick ? sizes_quick : sizes_full;
    int nsizes = quick ? 6 : 7;
    char what[200];
    for (int s = 0; s < nsizes; s++) {
        long len = sizes[s];
        unsigned char *buf = malloc((size_t)len + 1);
        int ok = 1;
        for (int root = 0; root < n; root++) {
            for (long i = 0; i < len; i++)
                buf[i] = r == root ? pat(root, 0, i) : 0;
            MPI_Bcast(buf, (int)len, MPI_BYTE, root, comm);
            for (long i = 0; i < len; i++)
                ok &= buf[i] == pat(root, 0, i);
        }
        snprintf(what, sizeof(what), "%s: bcast of %ld bytes from every root", cname, len);
        check(ok, what);
        free(buf);

        /* a strided type (every other int) at the receivers, contiguous
         * at the root: the same type signature */
        long ints = len / 4;
        int *v = calloc((size_t)ints * 2 + 1, sizeof(int));
        MPI_Datatype strided;
        MPI_Type_vector((int)(ints ? ints : 1), 1, 2, MPI_INT, &strided);
        MPI_Type_commit(&strided);
        int root = s % n;
        for (long i = 0; i < ints; i++)
            v[r == root ? i : 2 * i] = r == root ? (int)(i * 5 + 3) : -1;
        if (r == root)
            MPI_Bcast(v, (int)ints, MPI_INT, root, comm);
        else
            MPI_Bcast(v, ints ? 1 : 0, strided, root, comm);
        ok = 1;
        for (long i = 0; i < ints; i++)
            ok &= v[r == root ? i : 2 * i] == (int)(i * 5 + 3) &&
                  (r == root || v[2 * i + 1] == 0);
        snprintf(what, sizeof(what),
                 "%s: bcast of %ld ints, strided at the receivers", cname, ints);
        check(ok, what);
        MPI_Type_free(&strided);
        free(v);

        /* 6 packed bytes an element (short + int, padded): the steps cut
         * elements in two */
        struct si { short v; int i; };
        long npairs = len > 100000 ? 70001 : len / 6; /* 4 steps at most */
        struct si *ps = calloc((size_t)npairs + 1, sizeof(*ps));
        for (long i = 0; i < npairs; i++)
            if (r == root)
                ps[i] = (struct si){(short)(i * 7), (int)i + root};
        MPI_Bcast(ps, (int)npairs, MPI_SHORT_INT, root, comm);
        ok = 1;
        for (long i = 0; i < npairs; i++)
            ok &= ps[i].v == (short)(i * 7) && ps[i].i == (int)i + root;
        snprintf(what, sizeof(what), "%s: bcast of %ld short+int pairs", cname, npairs);
        check(ok, what);
        free(ps);

        /* allgather, and in place */
        unsigned char *sb = malloc((size_t)len + 1), *rb = malloc((size_t)len * n + 1);
        for (long i = 0; i < len; i++)
            sb[i] = pat(r, 1, i);
        memset(rb, 0, (size_t)len * n + 1);
        MPI_Allgather(sb, (int)len, MPI_BYTE, rb, (int)len, MPI_BYTE, comm);
        ok = 1;
        for (int j = 0; j < n; j++)
            for (long i = 0; i < len; i++)
                ok &= rb[j * len + i] == pat(j, 1, i);
        snprintf(what, sizeof(what), "%s: allgather of %ld bytes a rank", cname, len);
        check(ok, what);
        memset(rb, 0, (size_t)len * n + 1);
        memcpy(rb + r * len, sb, (size_t)len);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, (int)len,
                      MPI_BYTE, comm);
        ok = 1;
        for (int j = 0; j < n; j++)
            for (long i = 0; i < len; i++)
                ok &= rb[j * len + i] == pat(j, 1, i);
        snprintf(what, sizeof(what), "%s: allgather in place, %ld bytes", cname, len);
        check(ok, what);
        free(sb);
        free(rb);

        /* alltoall, and in place */
        long blk = len > 70000 ? 70000 : len;
        sb = malloc((size_t)blk * n + 1);
        rb = malloc((size_t)blk * n + 1);
        for (int j = 0; j < n; j++)
            for (long i = 0; i < blk; i++)
                sb[j * blk + i] = pat(r, j + 2, i);
        memset(rb, 0, (size_t)blk * n + 1);
        MPI_Alltoall(sb, (int)blk, MPI_BYTE, rb, (int)blk, MPI_BYTE, comm);
        ok = 1;
        for (int j = 0; j < n; j++)
            for (long i = 0; i < blk; i++)
                ok &= rb[j * blk + i] == pat(j, r + 2, i);
        snprintf(what, sizeof(what), "%s: alltoall of %ld bytes a pair", cname, blk);
        check(ok, what);
        memcpy(rb, sb, (size_t)blk * n);
        MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rb, (int)blk,
                     MPI_BYTE, comm);
        ok = 1;
        for (int j = 0; j < n; j++)
            for (long i = 0; i < blk; i++)
                ok &= rb[j * blk + i] == pat(j, r + 2, i);
        snprintf(what, sizeof(what), "%s: alltoall in place, %ld bytes", cname, blk);
        check(ok, what);
        free(sb);
        free(rb);
    }
}

/* one clock for every process of the host (MPI_Wtime counts from each
 * process' own origin) */
static double host_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One rank sleeps 60 ms before the barrier: nobody may leave it before
 * that rank entered. */
static void barrier_order(MPI_Comm comm, const char *cname)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    int ok = 1;
    for (int round = 0; round < 3; round++) {
        int sleeper = (round * 5) % n;
        MPI_Barrier(comm);
        double entered = 0;
        if (r == sleeper)
            usleep(60000);
        entered = host_now();
        MPI_Barrier(comm);
        double left = host_now();
        /* the sleeper's entry time, by point-to-point */
        double last = entered;
        if (r == sleeper) {
            for (int j = 0; j < n; j++)
                if (j != r)
                    MPI_Send(&entered, 1, MPI_DOUBLE, j, 79, comm);
        } else {
            MPI_Recv(&last, 1, MPI_DOUBLE, sleeper, 79, comm, MPI_STATUS_IGNORE);
        }
        ok &= left >= last; /* one clock: every simulated VM is one host */
    }
    char what[200];
    snprintf(what, sizeof(what), "%s: no rank leaves a barrier before the last enters", cname);
    check(ok, what);
}

/* Each collective as the first one on a fresh communicator (the region
 * area is set up by whichever comes first). */
static void first_use(void)
{
    const char *names[] = {"barrier", "bcast", "reduce", "allreduce",
                           "allgather", "alltoall"};
    for (int k = 0; k < 6; k++) {
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        int n = wsize, ok = 1;
        int *in = malloc(sizeof(int) * (size_t)n * 3),
            *out = calloc((size_t)n * 3, sizeof(int));
        for (int i = 0; i < n * 3; i++)
            in[i] = wrank * 1000 + i;
        switch (k) {
        case 0: MPI_Barrier(c); break;
        case 1:
            MPI_Bcast(in, 3, MPI_INT, n - 1, c);
            for (int i = 0; i < 3; i++)
                ok &= in[i] == (n - 1) * 1000 + i;
            break;
        case 2:
        case 3:
            if (k == 2)
                MPI_Reduce(in, out, 3, MPI_INT, MPI_SUM, 0, c);
            else
                MPI_Allreduce(in, out, 3, MPI_INT, MPI_SUM, c);
            for (int i = 0; i < 3 && (k == 3 || wrank == 0); i++)
                ok &= out[i] == 1000 * n * (n - 1) / 2 + n * i;
            break;
        case 4:
            MPI_Allgather(in, 3, MPI_INT, out, 3, MPI_INT, c);
            for (int j = 0; j < n; j++)
                for (int i = 0; i < 3; i++)
                    ok &= out[j * 3 + i] == j * 1000 + i;
            break;
        case 5:
            MPI_Alltoall(in, 3, MPI_INT, out, 3, MPI_INT, c);
            for (int j = 0; j < n; j++)
                for (int i = 0; i < 3; i++)
                    ok &= out[j * 3 + i] == j * 1000 + wrank * 3 + i;
            break;
        }
        char what[100];
        snprintf(what, sizeof(what), "%s as the first collective of a communicator", names[k]);
        check(ok, what);
        free(in);
        free(out);
        MPI_Comm_free(&c);
    }
}

/* Freeing a communicator must not wait for ranks that have not finished
 * its last collective: here the last rank reads the broadcast only after a
 * message that rank 0 sends after the free (a deadlock if the free waits).
 * A first broadcast by every rank comes before: a communicator's first
 * collective may synchronize (Open MPI 5's han makes its communicators
 * then), which MPI allows, and the lagging broadcast must be one that
 * needs no partner to start. */
static void free_while_behind(void)
{
    int ok = 1;
    for (int round = 0; round < 20; round++) {
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        int v[4] = {round, 1, 2, 3}, token = round;
        MPI_Barrier(c); /* the area exists before the broadcast */
        MPI_Bcast(&token, 1, MPI_INT, 0, c);
        if (wrank == 0) {
            MPI_Bcast(v, 4, MPI_INT, 0, c);
            MPI_Comm_free(&c);
            MPI_Send(&token, 1, MPI_INT, wsize - 1, 80, MPI_COMM_WORLD);
        } else if (wrank == wsize - 1) {
            memset(v, 0, sizeof(v));
            MPI_Recv(&token, 1, MPI_INT, 0, 80, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Bcast(v, 4, MPI_INT, 0, c);
            MPI_Comm_free(&c);
        } else {
            MPI_Bcast(v, 4, MPI_INT, 0, c);
            MPI_Comm_free(&c);
        }
        ok &= v[0] == round && v[3] == 3 && token == round;
    }
    check(ok, "a communicator freed while a rank has yet to read its last broadcast");
}

static void suite(MPI_Comm comm, const char *cname)
{
    barrier_order(comm, cname);
    reductions(comm, cname);
    noncommutative(comm, cname);
    movement(comm, cname);
}

/* Broadcasts of different sizes in a row: a rank that took another path
 * for one of them (a setting that differs between ranks) ends up with
 * another broadcast's data or waits for ever; the verdict is printed
 * before anything else can hang. */
static int bcasts(const char *pause_until)
{
    enum { BIG = 65536, SMALL = 64, MORE = 10 };
    unsigned char *big = malloc(BIG), small[SMALL];
    int bad = 0, root = pause_until ? 1 : 0;
    if (!big)
        return 2;
    if (pause_until) {
        int warm = wrank;
        MPI_Bcast(&warm, 1, MPI_INT, 0, MPI_COMM_WORLD); /* the area */
        bad += warm != 0;
        if (wrank == 0) {
            printf("mpi_coll: rank 0 pauses (pid %d)\n", (int)getpid());
            fflush(stdout);
            raise(SIGSTOP);
        }
        for (int i = 0; i < 1200 && access(pause_until, F_OK) != 0; i++)
            usleep(100 * 1000);
    }
    for (int round = 0; round <= MORE + 1; round++) {
        unsigned char *b = round == 1 ? small : big;
        size_t n = round == 1 ? SMALL : BIG;
        for (size_t i = 0; i < n; i++)
            b[i] = wrank == root ? (unsigned char)(round * 37 + i * 11 + 1) : 0;
        MPI_Bcast(b, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
        for (size_t i = 0; i < n; i++)
            bad += b[i] != (unsigned char)(round * 37 + i * 11 + 1);
        if (round == 1) {
            printf("mpi_coll: rank %d: first two broadcasts %s\n", wrank,
                   bad ? "WRONG" : "right");
            fflush(stdout);
        }
    }
    printf("mpi_coll: rank %d: all broadcasts %s\n", wrank,
           bad ? "WRONG" : "right");
    fflush(stdout);
    free(big);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return bad != 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    if (argc > 2 && strcmp(argv[1], "loop") == 0) {
        double until = MPI_Wtime() + atof(argv[2]);
        double x[64], y[64];
        long iters = 0;
        for (int i = 0; i < 64; i++)
            x[i] = wrank + i;
        int go = 1;
        while (go) {
            MPI_Allreduce(x, y, 64, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            iters++;
            if (iters == 1 && wrank == 0) {
                printf("mpi_coll: looping\n");
                fflush(stdout);
            }
            go = MPI_Wtime() < until;
            MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
        }
        printf("mpi_coll: rank %d: %ld iterations\n", wrank, iters);
        MPI_Finalize();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "bcasts") == 0)
        return bcasts(argc > 3 && strcmp(argv[2], "pause") == 0 ? argv[3]
                                                                 : NULL);
    first_use();
    free_while_behind();
    suite(MPI_COMM_WORLD, "world");
    if (!quick || wsize >= 3) {
        MPI_Comm half, dup, rev;
        MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, wrank, &half);
        suite(half, "split even/odd");
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        reductions(dup, "dup");
        MPI_Comm_split(MPI_COMM_WORLD, 0, wsize - wrank, &rev);
        noncommutative(rev, "reversed ranks");
        movement(rev, "reversed ranks");
        MPI_Comm_free(&half);
        MPI_Comm_free(&dup);
        MPI_Comm_free(&rev);
    }
    if (wrank == 0)
        printf("mpi_coll: %d ranks: %d passed, %d failed\n", wsize, passed, failed);
    MPI_Finalize();
    return failed != 0;
}
