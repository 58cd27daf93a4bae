/*
 * Standalone driver for the fuzz targets (fuzz_region, fuzz_chan), for
 * builds without libFuzzer: replays every file given (or found in given
 * directories), then runs random byte mutations of them for a bounded
 * number of rounds.
 *   fuzz_TARGET [--rounds N] [--seed S] [--write-seeds DIR] PATH...
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int ivshm_fuzz_write_seeds(const char *dir);

struct input {
    uint8_t *d;
    size_t n;
};

static struct input inputs[256];
static int ninputs;

static void load(const char *p)
{
    struct stat st;
    if (stat(p, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(p);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char q[1024];
            snprintf(q, sizeof(q), "%s/%s", p, e->d_name);
            load(q);
        }
        if (d)
            closedir(d);
        return;
    }
    if (ninputs >= 256)
        return;
    FILE *f = fopen(p, "rb");
    if (!f)
        return;
    struct input *in = &inputs[ninputs++];
    in->d = malloc((size_t)st.st_size + 1);
    in->n = fread(in->d, 1, (size_t)st.st_size, f);
    fclose(f);
}

int main(int argc, char **argv)
{
    long rounds = 20000;
    unsigned seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = (unsigned)atol(argv[++i]);
        else if (!strcmp(argv[i], "--write-seeds") && i + 1 < argc)
            return ivshm_fuzz_write_seeds(argv[++i]);
        else
            load(argv[i]);
    }
    if (ninputs == 0) {
        fprintf(stderr, "%s: no inputs\n", argv[0]);
        return 2;
    }
    for (int i = 0; i < ninputs; i++)
        LLVMFuzzerTestOneInput(inputs[i].d, inputs[i].n);
    srand(seed);
    uint8_t *buf = NULL;
    for (long r = 0; r < rounds; r++) {
        struct input *in = &inputs[rand() % ninputs];
        buf = realloc(buf, in->n ? in->n : 1);
        memcpy(buf, in->d, in->n);
        /* flip a few bytes, biased towards the header and table starts */
        int flips = 1 + rand() % 8;
        for (int k = 0; k < flips && in->n > 1; k++) {
            size_t span = (rand() & 1) ? 300 : in->n - 1;
            if (span > in->n - 1)
                span = in->n - 1;
            size_t at = 1 + (size_t)rand() % span;
            buf[at] = (rand() & 3) ? (uint8_t)rand() : (uint8_t)(buf[at] ^ 0x80);
        }
        if (in->n)
            buf[0] = (uint8_t)(rand() & 1 ? 1 : buf[0]);
        LLVMFuzzerTestOneInput(buf, in->n);
    }
    free(buf);
    printf("%s: %d seeds and %ld mutations ran without a crash\n", argv[0],
           ninputs, rounds);
    return 0;
}
