#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "year.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  int n = atoi(argv[1]), nf = 90, copies = 16, reps = atoi(argv[3]);
  FILE *f = fopen(argv[2], "r");
  double *base = malloc(sizeof(double) * 1000 * nf);
  for (int i = 0; i < 1000; i++) { for (int j = 0; j < nf; j++) fscanf(f, "%lf,", &base[i*nf+j]); double y; fscanf(f, "%lf", &y); }
  double *rows = malloc(sizeof(double) * (size_t)n * nf * copies); double *out = malloc(8 * n);
  float *conv = malloc(sizeof(float) * (size_t)n * nf);
  srand(1);
  for (int c = 0; c < copies; c++) for (int i = 0; i < n; i++) memcpy(rows + ((size_t)c*n + i)*nf, base + (rand()%1000)*nf, nf*8);
  year_set_num_threads(atoi(argv[4]));
  double a = 0, b = 0;
  for (int round = 0; round < 9; round++) {
    double t0 = now();
    for (int r = 0; r < reps; r++) year_predict(rows + (size_t)(r % copies)*n*nf, n, out);
    double t1 = now();
    for (int r = 0; r < reps; r++) { double *src = rows + (size_t)(r % copies)*n*nf; for (size_t k = 0; k < (size_t)n*nf; k++) conv[k] = (float)src[k]; year_predict_f32(conv, n, out); }
    double t2 = now();
    a += t1 - t0; b += t2 - t1;
  }
  printf("n=%d threads=%s: double direct %.0f ns/row, converted in C + f32 %.0f ns/row (%.2f)\n", n, argv[4], a / (9.0*reps*n) * 1e9, b / (9.0*reps*n) * 1e9, a / b);
}
