/* Data movement between NHWC Halide kernels that numpy does slowly: out (P, B, A) = in (P, A, B)
 * transposed in its last two axes. It is every layout conversion (NCHW <-> NHWC: A or B is the
 * channel count) and ShuffleNet's channel shuffle on NHWC values (A = 2 groups). numpy copies
 * such a view one element at a time; here a short A is written as A interleaved streams (the
 * compiler vectorises the fixed-A loops), anything else in cache-sized tiles. */

#include <stdint.h>

#define TILE 32

static void interleave_2(const float *restrict in, float *restrict out, int64_t b) {
    const float *restrict x0 = in, *restrict x1 = in + b;
    for (int64_t j = 0; j < b; j++) {
        out[2 * j] = x0[j];
        out[2 * j + 1] = x1[j];
    }
}

static void interleave_3(const float *restrict in, float *restrict out, int64_t b) {
    const float *restrict x0 = in, *restrict x1 = in + b, *restrict x2 = in + 2 * b;
    for (int64_t j = 0; j < b; j++) {
        out[3 * j] = x0[j];
        out[3 * j + 1] = x1[j];
        out[3 * j + 2] = x2[j];
    }
}

static void tiled(const float *restrict in, float *restrict out, int64_t a, int64_t b) {
    for (int64_t i0 = 0; i0 < a; i0 += TILE)
        for (int64_t j0 = 0; j0 < b; j0 += TILE) {
            int64_t i1 = i0 + TILE < a ? i0 + TILE : a, j1 = j0 + TILE < b ? j0 + TILE : b;
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = i0; i < i1; i++) out[j * a + i] = in[i * b + j];
        }
}

void wp_swap_last_axes(const float *in, float *out, int64_t p, int64_t a, int64_t b) {
    for (int64_t k = 0; k < p; k++, in += a * b, out += a * b) {
        switch (a) {
        case 2: interleave_2(in, out, b); break;
        case 3: interleave_3(in, out, b); break;
        default: tiled(in, out, a, b); break;
        }
    }
}
