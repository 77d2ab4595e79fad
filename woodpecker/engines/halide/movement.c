/* Data movement between NHWC Halide kernels that numpy does slowly: out (P, B, A) = in (P, A, B)
 * transposed in its last two axes. It is every layout conversion (NCHW <-> NHWC: A or B is the
 * channel count) and ShuffleNet's channel shuffle on NHWC values (A = 2 groups). numpy copies
 * such a view one element at a time; here a short A is written as A interleaved streams (the
 * compiler vectorises the fixed-A loops), anything else in cache-sized tiles. A large copy runs
 * on the runtime's thread pool (spin_pool.c), as the kernels around it do. */

#include <stddef.h>
#include <stdint.h>

#define TILE 32
/* Below this many floats one thread copies: waking the pool costs more than it saves. */
#define PAR_MIN_FLOATS (32 * 1024)
/* Parallel tasks per copy: a few per thread, so that the pool balances them. */
#define PAR_TASKS 8

/* halide_do_par_for runs tasks [min, min + size) on the installed pool (spin_pool.c) */
#include "wp_runtime.h"

/* Columns [j0, j1) of one (A, B) -> (B, A) transpose. */
static void columns(const float *restrict in, float *restrict out, int64_t a, int64_t b,
                    int64_t j0, int64_t j1) {
    if (a == 2) {
        const float *restrict x0 = in, *restrict x1 = in + b;
        for (int64_t j = j0; j < j1; j++) {
            out[2 * j] = x0[j];
            out[2 * j + 1] = x1[j];
        }
    } else if (a == 3) {
        const float *restrict x0 = in, *restrict x1 = in + b, *restrict x2 = in + 2 * b;
        for (int64_t j = j0; j < j1; j++) {
            out[3 * j] = x0[j];
            out[3 * j + 1] = x1[j];
            out[3 * j + 2] = x2[j];
        }
    } else {
        for (int64_t i0 = 0; i0 < a; i0 += TILE)
            for (int64_t t0 = j0; t0 < j1; t0 += TILE) {
                int64_t i1 = i0 + TILE < a ? i0 + TILE : a, t1 = t0 + TILE < j1 ? t0 + TILE : j1;
                for (int64_t j = t0; j < t1; j++)
                    for (int64_t i = i0; i < i1; i++) out[j * a + i] = in[i * b + j];
            }
    }
}

/* A parallel task is either `chunk` whole matrices (p large: ShuffleNet's shuffle, one matrix
 * per pixel) or one matrix's `parts`-th share of columns (p small: a layout conversion). */
struct job {
    const float *in;
    float *out;
    int64_t p, a, b, chunk, parts;
};

static int task(void *user_context, int index, uint8_t *closure) {
    const struct job *jb = (const struct job *)closure;
    int64_t size = jb->a * jb->b;
    (void)user_context;
    if (jb->parts == 1) {
        int64_t k0 = index * jb->chunk, k1 = k0 + jb->chunk < jb->p ? k0 + jb->chunk : jb->p;
        for (int64_t k = k0; k < k1; k++)
            columns(jb->in + k * size, jb->out + k * size, jb->a, jb->b, 0, jb->b);
    } else {
        int64_t k = index / jb->parts, r = index % jb->parts;
        columns(jb->in + k * size, jb->out + k * size, jb->a, jb->b, jb->b * r / jb->parts,
                jb->b * (r + 1) / jb->parts);
    }
    return 0;
}

void wp_swap_last_axes(const float *in, float *out, int64_t p, int64_t a, int64_t b) {
    struct job jb = {in, out, p, a, b, p, 1};
    int tasks = 1;
    if (p * a * b >= PAR_MIN_FLOATS) {
        if (p >= PAR_TASKS) {
            jb.chunk = (p + PAR_TASKS - 1) / PAR_TASKS;
            tasks = (int)((p + jb.chunk - 1) / jb.chunk);
        } else {
            jb.parts = (PAR_TASKS + p - 1) / p;
            tasks = (int)(p * jb.parts);
        }
    }
    if (tasks == 1)
        task(NULL, 0, (uint8_t *)&jb);
    else
        halide_do_par_for(NULL, task, 0, tasks, (uint8_t *)&jb);
}
