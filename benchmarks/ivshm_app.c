/*
 * ivshm-app: a communication-heavy application kernel with its time split
 * into compute and communication (benchmarks/paper-eval.sh), standing in
 * for P3DFFT and NAS, which Debian does not package.
 *
 *   fft      3-D complex FFT of an N^3 grid (default 128^3) in z-slabs:
 *            radix-2 FFTs along x and y, a global transpose
 *            (MPI_Alltoallv) to y-slabs, FFTs along z, and the transpose
 *            back; the inverse transform checks the result
 *   stencil  7-point Jacobi on a 3-D Cartesian decomposition (weak
 *            scaling: an L^3 block per rank, default 64^3), six face
 *            exchanges per sweep
 *
 *   ivshm-app fft|stencil [-n N] [-i ITERS] [-r REPEATS]
 *
 * Prints "kernel ranks total_s compute_s comm_s": per iteration, the
 * slowest rank's time of each phase, median over REPEATS.
 */
#include <complex.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- 3-D FFT ---- */

/* in-place radix-2 FFT of n (power of two) values spaced by stride */
static void fft1d(double complex *a, int n, int stride, int inverse)
{
    for (int i = 1, j = 0; i < n; i++) {
        int bit = n >> 1;
        for (; j & bit; bit >>= 1)
            j ^= bit;
        j ^= bit;
        if (i < j) {
            double complex t = a[i * stride];
            a[i * stride] = a[j * stride];
            a[j * stride] = t;
        }
    }
    for (int len = 2; len <= n; len <<= 1) {
        double ang = 2 * M_PI / len * (inverse ? 1 : -1);
        double complex wl = cexp(I * ang);
        for (int i = 0; i < n; i += len) {
            double complex w = 1;
            for (int k = 0; k < len / 2; k++) {
                double complex u = a[(i + k) * stride];
                double complex v = a[(i + k + len / 2) * stride] * w;
                a[(i + k) * stride] = u + v;
                a[(i + k + len / 2) * stride] = u - v;
                w *= wl;
            }
        }
    }
}

struct fft {
    int n, *cnt, *off; /* planes per rank and first plane */
    int nz;            /* my z-planes (= my y-planes after the transpose) */
    double complex *a, *b, *sbuf, *rbuf;
    int *scnt, *sdsp, *rcnt, *rdsp;
    double t_comp, t_comm;
};

static void fft_setup(struct fft *f, int n)
{
    f->n = n;
    f->cnt = malloc(sizeof(int) * (size_t)size);
    f->off = malloc(sizeof(int) * (size_t)size);
    for (int p = 0, o = 0; p < size; p++) {
        f->cnt[p] = n / size + (p < n % size);
        f->off[p] = o;
        o += f->cnt[p];
    }
    f->nz = f->cnt[rank];
    size_t local = (size_t)f->nz * n * n;
    f->a = malloc(sizeof(double complex) * (local ? local : 1));
    f->b = malloc(sizeof(double complex) * (local ? local : 1));
    f->sbuf = malloc(sizeof(double complex) * (local ? local : 1));
    f->rbuf = malloc(sizeof(double complex) * (local ? local : 1));
    f->scnt = malloc(sizeof(int) * (size_t)size);
    f->sdsp = malloc(sizeof(int) * (size_t)size);
    f->rcnt = malloc(sizeof(int) * (size_t)size);
    f->rdsp = malloc(sizeof(int) * (size_t)size);
    /* counts in MPI_C_DOUBLE_COMPLEX elements: my planes x their planes x n */
    for (int p = 0, so = 0; p < size; p++) {
        f->scnt[p] = f->rcnt[p] = f->nz * f->cnt[p] * n;
        f->sdsp[p] = f->rdsp[p] = so;
        so += f->scnt[p];
    }
    /* the field: a smooth function of the global coordinates */
    for (int z = 0; z < f->nz; z++)
        for (int y = 0; y < n; y++)
            for (int x = 0; x < n; x++)
                f->a[((size_t)z * n + y) * n + x] =
                    sin(0.1 * x + 0.2 * y + 0.3 * (z + f->off[rank])) +
                    I * cos(0.05 * x * y);
}

/* a[zl][y][x] (z-slabs) -> b[yl][z][x] (y-slabs), through Alltoallv */
static void transpose(struct fft *f, double complex *from, double complex *to)
{
    int n = f->n;
    double t0 = MPI_Wtime();
    for (int p = 0; p < size; p++) { /* pack: for p, its y range */
        double complex *o = f->sbuf + f->sdsp[p];
        for (int zl = 0; zl < f->nz; zl++)
            for (int y = f->off[p]; y < f->off[p] + f->cnt[p]; y++)
                memcpy(o + ((size_t)zl * f->cnt[p] + (y - f->off[p])) * n,
                       from + ((size_t)zl * n + y) * n,
                       sizeof(double complex) * (size_t)n);
    }
    double t1 = MPI_Wtime();
    MPI_Alltoallv(f->sbuf, f->scnt, f->sdsp, MPI_C_DOUBLE_COMPLEX, f->rbuf,
                  f->rcnt, f->rdsp, MPI_C_DOUBLE_COMPLEX, MPI_COMM_WORLD);
    double t2 = MPI_Wtime();
    for (int p = 0; p < size; p++) { /* unpack: from p, its z range */
        const double complex *in = f->rbuf + f->rdsp[p];
        for (int zp = 0; zp < f->cnt[p]; zp++)
            for (int yl = 0; yl < f->nz; yl++)
                memcpy(to + ((size_t)yl * n + f->off[p] + zp) * n,
                       in + ((size_t)zp * f->nz + yl) * n,
                       sizeof(double complex) * (size_t)n);
    }
    f->t_comp += (t1 - t0) + (MPI_Wtime() - t2);
    f->t_comm += t2 - t1;
}

/* forward or inverse 3-D transform of f->a (z-slabs, result in z-slabs) */
static void fft3d(struct fft *f, int inverse)
{
    int n = f->n;
    double t0 = MPI_Wtime();
    for (int z = 0; z < f->nz; z++) {
        double complex *pl = f->a + (size_t)z * n * n;
        for (int y = 0; y < n; y++)
            fft1d(pl + (size_t)y * n, n, 1, inverse);
        for (int x = 0; x < n; x++)
            fft1d(pl + x, n, n, inverse);
    }
    f->t_comp += MPI_Wtime() - t0;
    transpose(f, f->a, f->b); /* b[yl][z][x] */
    t0 = MPI_Wtime();
    for (int yl = 0; yl < f->nz; yl++)
        for (int x = 0; x < n; x++)
            fft1d(f->b + (size_t)yl * n * n + x, n, n, inverse);
    f->t_comp += MPI_Wtime() - t0;
    transpose(f, f->b, f->a); /* the same exchange maps y-slabs back */
}

/* ---- 7-point stencil ---- */

struct stencil {
    int l; /* interior cells per dimension */
    int nb[6];
    MPI_Comm cart;
    double *u, *v, *sb[6], *rb[6];
    double t_comp, t_comm;
};

#define IDX(s, i, j, k) ((((size_t)(i)) * ((s)->l + 2) + (j)) * ((s)->l + 2) + (k))

static void stencil_setup(struct stencil *s, int l)
{
    s->l = l;
    int dims[3] = {0, 0, 0}, per[3] = {1, 1, 1};
    MPI_Dims_create(size, 3, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims, per, 0, &s->cart);
    for (int d = 0; d < 3; d++)
        MPI_Cart_shift(s->cart, d, 1, &s->nb[2 * d], &s->nb[2 * d + 1]);
    size_t cells = (size_t)(l + 2) * (l + 2) * (l + 2);
    s->u = calloc(cells, sizeof(double));
    s->v = calloc(cells, sizeof(double));
    for (int f = 0; f < 6; f++) {
        s->sb[f] = malloc(sizeof(double) * (size_t)l * l);
        s->rb[f] = malloc(sizeof(double) * (size_t)l * l);
    }
    for (int i = 1; i <= l; i++)
        for (int j = 1; j <= l; j++)
            for (int k = 1; k <= l; k++)
                s->u[IDX(s, i, j, k)] = (double)((i * 7 + j * 3 + k + rank) % 17);
}

/* face f (0..5: -x +x -y +y -z +z) of the interior, or of the halo */
static void face_copy(struct stencil *s, int f, double *buf, int halo, int in)
{
    int l = s->l, d = f / 2;
    int pos = (f % 2) ? (halo ? l + 1 : l) : (halo ? 0 : 1);
    size_t m = 0;
    for (int a = 1; a <= l; a++)
        for (int b = 1; b <= l; b++, m++) {
            size_t ix = d == 0 ? IDX(s, pos, a, b)
                      : d == 1 ? IDX(s, a, pos, b)
                               : IDX(s, a, b, pos);
            if (in)
                s->u[ix] = buf[m];
            else
                buf[m] = s->u[ix];
        }
}

static void stencil_sweep(struct stencil *s)
{
    int l = s->l, n = l * l;
    double t0 = MPI_Wtime();
    for (int f = 0; f < 6; f++)
        face_copy(s, f, s->sb[f], 0, 0);
    double t1 = MPI_Wtime();
    MPI_Request q[12];
    for (int f = 0; f < 6; f++) {
        /* what arrives for my face f comes from neighbour f, which sent
         * its opposite face */
        MPI_Irecv(s->rb[f], n, MPI_DOUBLE, s->nb[f], f ^ 1, s->cart, &q[f]);
        MPI_Isend(s->sb[f], n, MPI_DOUBLE, s->nb[f], f, s->cart, &q[6 + f]);
    }
    MPI_Waitall(12, q, MPI_STATUSES_IGNORE);
    double t2 = MPI_Wtime();
    for (int f = 0; f < 6; f++)
        face_copy(s, f, s->rb[f], 1, 1);
    for (int i = 1; i <= l; i++)
        for (int j = 1; j <= l; j++)
            for (int k = 1; k <= l; k++)
                s->v[IDX(s, i, j, k)] =
                    (s->u[IDX(s, i - 1, j, k)] + s->u[IDX(s, i + 1, j, k)] +
                     s->u[IDX(s, i, j - 1, k)] + s->u[IDX(s, i, j + 1, k)] +
                     s->u[IDX(s, i, j, k - 1)] + s->u[IDX(s, i, j, k + 1)]) /
                    6.0;
    double *t = s->u;
    s->u = s->v;
    s->v = t;
    s->t_comp += (t1 - t0) + (MPI_Wtime() - t2);
    s->t_comm += t2 - t1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *kernel = argc > 1 ? argv[1] : "fft";
    int n = 0, iters = 0, repeats = 5, c;
    optind = 2;
    while ((c = getopt(argc, argv, "n:i:r:")) != -1) {
        if (c == 'n')
            n = atoi(optarg);
        else if (c == 'i')
            iters = atoi(optarg);
        else if (c == 'r')
            repeats = atoi(optarg) > 0 && atoi(optarg) <= 64 ? atoi(optarg) : 5;
    }
    int is_fft = strcmp(kernel, "fft") == 0;
    if (!is_fft && strcmp(kernel, "stencil") != 0) {
        if (rank == 0)
            fprintf(stderr, "usage: ivshm-app fft|stencil [-n N] [-i ITERS] "
                            "[-r REPEATS]\n");
        MPI_Finalize();
        return 2;
    }
    if (!n)
        n = is_fft ? 128 : 64;
    if (!iters)
        iters = is_fft ? 4 : 20;
    if (is_fft && (n & (n - 1))) {
        if (rank == 0)
            fprintf(stderr, "ivshm-app: fft needs N a power of two\n");
        MPI_Finalize();
        return 2;
    }
    double tot[64], comp[64], comm[64];
    int bad = 0;
    struct fft f;
    struct stencil s;
    if (is_fft)
        fft_setup(&f, n);
    else
        stencil_setup(&s, n);
    for (int r = -1; r < repeats; r++) { /* r = -1: warm-up */
        double c0, m0;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (is_fft) {
            f.t_comp = f.t_comm = 0;
            for (int i = 0; i < iters; i++) {
                double complex probe = f.nz ? f.a[7] : 0;
                fft3d(&f, 0);
                fft3d(&f, 1); /* inverse: back to n^3 times the input */
                if (f.nz && cabs(f.a[7] / ((double)n * n * n) - probe) > 1e-6)
                    bad = 1;
                if (f.nz) /* renormalise what the round trip scaled */
                    for (size_t k = 0; k < (size_t)f.nz * n * n; k++)
                        f.a[k] /= (double)n * n * n;
            }
            c0 = f.t_comp;
            m0 = f.t_comm;
        } else {
            s.t_comp = s.t_comm = 0;
            for (int i = 0; i < iters; i++)
                stencil_sweep(&s);
            c0 = s.t_comp;
            m0 = s.t_comm;
        }
        double t = MPI_Wtime() - t0, mx[3], in[3] = {t, c0, m0};
        MPI_Reduce(in, mx, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (r >= 0) {
            tot[r] = mx[0] / iters;
            comp[r] = mx[1] / iters;
            comm[r] = mx[2] / iters;
        }
    }
    int anybad;
    MPI_Reduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(tot, (size_t)repeats, sizeof(double), cmpd);
        qsort(comp, (size_t)repeats, sizeof(double), cmpd);
        qsort(comm, (size_t)repeats, sizeof(double), cmpd);
        printf("# ivshm-app %s n=%d iters=%d, seconds per iteration "
               "(slowest rank, median of %d)\n",
               kernel, n, iters, repeats);
        printf("%s %d %.6f %.6f %.6f\n", kernel, size, tot[repeats / 2],
               comp[repeats / 2], comm[repeats / 2]);
        if (anybad)
            fprintf(stderr, "ivshm-app: the inverse FFT did not give the "
                            "input back\n");
    }
    MPI_Finalize();
    return rank == 0 && anybad ? 1 : 0;
}
