/* A 1x1 stride-1 convolution over NHWC activations as libxsmm's JIT-generated small GEMMs: the
 * candidate microkernel library that benchmarks/microkernel_choice.py measures against
 * Woodpecker's Halide templates and oneDNN (issue 77, deliverable 2: measure the library
 * before hand-writing one).
 *
 * y[p][k] = epilogue(sum_c x[p][c] * w[c][k] + bias[k] (+ res[p][k])) for P pixels, C input and
 * K output channels. Pixels are cut in blocks of `pb`, output channels in blocks of `mb`; each
 * (pixel block, channel block) tile is one libxsmm kernel call (column-major: C(mb x pb) =
 * A(mb x C) B(C x pb), A = w's columns, B = x's block, C = y's block) followed by its epilogue
 * while the tile is in L1 — the tensorize pattern: the library owns the register tile, the
 * loops around it (here C, in the harness; in a plan, Halide) own everything else. Tiles are
 * split over `threads` OpenMP threads, contiguous per thread. */
#include <libxsmm.h>
#include <omp.h>
#include <stddef.h>

typedef struct {
    libxsmm_smmfunction full, tail;   /* mb channels, and the last block's remainder */
    int P, C, K, pb, mb, relu, threads;
} plan_t;

static plan_t plans[64];
static int nplans;

/* A plan for these sizes and blocks (-1: libxsmm has no kernel for them). */
int wp_xsmm_plan(int P, int C, int K, int pb, int mb, int relu, int threads) {
    if (nplans == 64 || pb < 1 || mb < 1) return -1;
    float alpha = 1.0f, beta = 0.0f;
    libxsmm_blasint lda = K, ldb = C, ldc = K;
    int tail_m = K % mb, tail_n = P % pb;
    plan_t *p = &plans[nplans];
    p->full = libxsmm_smmdispatch(mb, pb, C, &lda, &ldb, &ldc, &alpha, &beta, NULL, NULL);
    p->tail = tail_m ? libxsmm_smmdispatch(tail_m, pb, C, &lda, &ldb, &ldc, &alpha, &beta, NULL,
                                           NULL) : p->full;
    if (!p->full || !p->tail || tail_n) return -1;   /* (the harness picks pb dividing P) */
    p->P = P; p->C = C; p->K = K; p->pb = pb; p->mb = mb; p->relu = relu; p->threads = threads;
    return nplans++;
}

void wp_xsmm_run(int id, const float *x, const float *w, const float *bias, const float *res,
                 float *y) {
    const plan_t *p = &plans[id];
    int nblocks_p = p->P / p->pb, nblocks_k = (p->K + p->mb - 1) / p->mb;
    int tiles = nblocks_p * nblocks_k;
#pragma omp parallel for schedule(static) num_threads(p->threads)
    for (int t = 0; t < tiles; t++) {
        int bp = t / nblocks_k, bk = t % nblocks_k;
        int p0 = bp * p->pb, k0 = bk * p->mb;
        int m = k0 + p->mb <= p->K ? p->mb : p->K - k0;
        float *out = y + (size_t)p0 * p->K + k0;
        (m == p->mb ? p->full : p->tail)(w + k0, x + (size_t)p0 * p->C, out);
        for (int i = 0; i < p->pb; i++) {
            float *row = out + (size_t)i * p->K;
            const float *r = res ? res + (size_t)(p0 + i) * p->K + k0 : NULL;
            for (int j = 0; j < m; j++) {
                float v = row[j] + (bias ? bias[k0 + j] : 0.0f) + (r ? r[j] : 0.0f);
                row[j] = p->relu && v < 0.0f ? 0.0f : v;
            }
        }
    }
}

void wp_xsmm_init(void) { libxsmm_init(); }
