/* A C program calling an exported library through its header only (tests/test_export.py).
 *
 * Built with -DNAME=<name> -DHEADER='"<name>.h"' (and -DLEAF for a library with leaf
 * output, whose ids then follow in OUT.bin; -DCONTRIBS for one with contributions,
 * which follow the values, from float64 then float32 rows). Usage:
 *     check ROWS.bin N_ROWS OUT.bin [THREADS]
 * reads N_ROWS x N_FEATURES float64 rows, writes value, margin and value-from-float32
 * (each N_ROWS x N_OUTPUTS float64) to OUT.bin, checks the error paths, and with THREADS
 * runs that many pthreads at once, each predicting every row in batches of several sizes
 * (and its contributions), and checks their results equal the single-threaded ones bit
 * for bit. Exit 0: all well.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(suffix) CAT(NAME, suffix)
#define N_FEATURES CAT(NAME, _N_FEATURES)
#define N_OUTPUTS CAT(NAME, _N_OUTPUTS)
#define N_PHI (N_OUTPUTS * (N_FEATURES + 1)) /* contributions a row */

static double *rows;
static float *rows32;
static double *value;
static double *phi;
static int64_t n_rows;

typedef int (*predict_fn)(const double *, int64_t, double *);

/* Every row through `fn` in calls of `batch` rows into `out` (`width` values a row),
 * compared with `expected`: the failed calls and mismatches. */
static long in_batches(long id, predict_fn fn, int64_t batch, int64_t width, double *out,
                       const double *expected) {
    long bad = 0;
    if (batch < 1) batch = 1;
    for (int64_t at = 0; at < n_rows; at += batch) {
        int64_t n = at + batch > n_rows ? n_rows - at : batch;
        if (fn(rows + at * N_FEATURES, n, out + at * width) != 0) {
            fprintf(stderr, "thread %ld: %s\n", id, FN(_last_error)());
            bad++;
        }
    }
    return bad + (memcmp(out, expected, sizeof(double) * (size_t)(n_rows * width)) != 0);
}

static void *worker(void *arg) {
    long id = (long)arg;
    int64_t batches[] = {1, 3, 8, 9, 100, n_rows};
    double *out = malloc(sizeof(double) * (size_t)(n_rows * N_OUTPUTS + 1));
    long bad = 0;
    for (int round = 0; round < 4; round++)
        bad += in_batches(id, FN(_predict), batches[(id + round) % 6], N_OUTPUTS, out, value);
    free(out);
#ifdef CONTRIBS
    double *mine = malloc(sizeof(double) * (size_t)(n_rows * N_PHI + 1));
    bad += in_batches(id, FN(_predict_contribs), batches[id % 6], N_PHI, mine, phi);
    free(mine);
#endif
    return (void *)bad;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: check ROWS.bin N_ROWS OUT.bin [THREADS]\n");
        return 2;
    }
    n_rows = atoll(argv[2]);
    size_t cells = (size_t)(n_rows * N_FEATURES), outs = (size_t)(n_rows * N_OUTPUTS);
    rows = malloc(sizeof(double) * cells + 8);
    rows32 = malloc(sizeof(float) * cells + 8);
    value = malloc(sizeof(double) * outs + 8);
    double *margin = malloc(sizeof(double) * outs + 8);
    double *value32 = malloc(sizeof(double) * outs + 8);
    FILE *in = fopen(argv[1], "rb");
    if (!in || fread(rows, sizeof(double), cells, in) != cells) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    fclose(in);
    for (size_t i = 0; i < cells; i++) rows32[i] = (float)rows[i];

    if (FN(_predict)(rows, n_rows, value) || FN(_predict_margin)(rows, n_rows, margin) ||
        FN(_predict_f32)(rows32, n_rows, value32)) {
        fprintf(stderr, "predict failed: %s\n", FN(_last_error)());
        return 1;
    }
    /* The error paths: a negative count, NULL pointers; an empty call succeeds. */
    if (strcmp(FN(_last_error)(), "") != 0) return 3;
    if (FN(_predict)(rows, -1, value) != 1 || strstr(FN(_last_error)(), "negative") == NULL)
        return 4;
    if (FN(_predict)(NULL, 1, value) != 1 || FN(_predict_f32)(rows32, 1, NULL) != 1 ||
        strstr(FN(_last_error)(), "NULL") == NULL)
        return 5;
    if (FN(_predict)(NULL, 0, NULL) != 0) return 6;
    if (strstr(FN(_metadata)(), "\"n_features\"") == NULL) return 7;

    FILE *out = fopen(argv[3], "wb");
    fwrite(value, sizeof(double), outs, out);
    fwrite(margin, sizeof(double), outs, out);
    fwrite(value32, sizeof(double), outs, out);
#ifdef CONTRIBS
    size_t phis = (size_t)(n_rows * N_PHI);
    phi = malloc(sizeof(double) * phis + 8);
    double *phi32 = malloc(sizeof(double) * phis + 8);
    if (FN(_predict_contribs)(rows, n_rows, phi) != 0 ||
        FN(_predict_contribs_f32)(rows32, n_rows, phi32) != 0) {
        fprintf(stderr, "predict_contribs failed: %s\n", FN(_last_error)());
        return 1;
    }
    if (FN(_predict_contribs)(rows, 1, NULL) != 1 || FN(_predict_contribs)(NULL, 0, NULL) != 0)
        return 9;
    fwrite(phi, sizeof(double), phis, out);
    fwrite(phi32, sizeof(double), phis, out);
#endif
#ifdef LEAF /* then the leaf ids follow, n_rows x N_TREES int32 */
    size_t ids = (size_t)(n_rows * CAT(NAME, _N_TREES));
    int32_t *leaves = malloc(sizeof(int32_t) * ids + 4);
    if (FN(_predict_leaf)(rows, n_rows, leaves) != 0) {
        fprintf(stderr, "predict_leaf failed: %s\n", FN(_last_error)());
        return 1;
    }
    fwrite(leaves, sizeof(int32_t), ids, out);
#endif
    fclose(out);

    if (argc > 4) {
        int threads = atoi(argv[4]);
        pthread_t ids[64];
        long bad = 0;
        FN(_set_num_threads)(2); /* parallel kernels inside parallel callers */
        for (long t = 0; t < threads && t < 64; t++)
            pthread_create(&ids[t], NULL, worker, (void *)t);
        for (long t = 0; t < threads && t < 64; t++) {
            void *result;
            pthread_join(ids[t], &result);
            bad += (long)result;
        }
        if (bad) {
            fprintf(stderr, "%ld thread rounds differ or failed\n", bad);
            return 8;
        }
    }
    printf("ok\n");
    return 0;
}
