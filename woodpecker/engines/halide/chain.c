/* Runs a chain of Halide kernels bound to fixed buffers (a plan's consecutive Halide steps over
 * its arena, stages of kernels run at the same time among them) in one foreign call: Python then pays one ctypes call per chain instead of one
 * per kernel (aot.BoundCall.chain). Kernel i is fns[i], called with nargs[i] buffer pointers
 * taken in order from args. Returns 0, or the failing kernel's error code with its index in
 * *failed. */

#include "wp_runtime.h"

typedef void *p;

/* Calls kernel `f` with `nargs` buffer pointers from `a`; -1 for more than any template
 * passes. Also used by wp_run_stage (spin_pool.c). */
int wp_call_kernel(void *f, int nargs, p const *a) {
    switch (nargs) {
    case 1: return ((int (*)(p))f)(a[0]);
    case 2: return ((int (*)(p, p))f)(a[0], a[1]);
    case 3: return ((int (*)(p, p, p))f)(a[0], a[1], a[2]);
    case 4: return ((int (*)(p, p, p, p))f)(a[0], a[1], a[2], a[3]);
    case 5: return ((int (*)(p, p, p, p, p))f)(a[0], a[1], a[2], a[3], a[4]);
    case 6: return ((int (*)(p, p, p, p, p, p))f)(a[0], a[1], a[2], a[3], a[4], a[5]);
    case 7: return ((int (*)(p, p, p, p, p, p, p))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
    case 8: return ((int (*)(p, p, p, p, p, p, p, p))f)(a[0], a[1], a[2], a[3], a[4], a[5],
                                                          a[6], a[7]);
    default: return -1;
    }
}

/* Present in runtimes whose chains take stages (a plan saved before carries one without). */
int wp_chain_stages(void) { return 1; }

/* An entry with nargs[i] = -k (and no function) opens a stage of a parallel schedule: the next
 * k kernels run at the same time (wp_run_stage, spin_pool.c), then the chain goes on. */
int wp_run_chain(int n, void *const *fns, const int *nargs, p const *args, int *failed) {
    for (int i = 0; i < n; i++) {
        int rc;
        if (nargs[i] < 0) {
            int k = -nargs[i], used = 0, f = 0;
            for (int j = 1; j <= k; j++) used += nargs[i + j];
            rc = wp_run_stage(k, fns + i + 1, nargs + i + 1, args, &f);
            if (rc) {
                *failed = i + 1 + f;
                return rc;
            }
            args += used;
            i += k;
            continue;
        }
        rc = wp_call_kernel(fns[i], nargs[i], args);
        if (rc) {
            *failed = i;
            return rc;
        }
        args += nargs[i];
    }
    return 0;
}
