/* What the C files of Woodpecker's Halide runtime (spin_pool.c, chain.c, movement.c, linked
 * with Halide's runtime into one library by aot.py) call in one another and in Halide's
 * runtime, declared once: each file includes this header, so a changed signature fails to
 * compile instead of calling through a stale copy of a prototype. */
#ifndef WP_RUNTIME_H
#define WP_RUNTIME_H

#include <stdint.h>

/* Halide's runtime: a parallel loop's body, a parallel-for implementation, the hook that
 * installs one (spin_pool.c installs its pool) and the parallel-for itself. */
typedef int (*task_fn)(void *user_context, int index, uint8_t *closure);
typedef int (*par_for_fn)(void *user_context, task_fn fn, int min, int size, uint8_t *closure);
extern par_for_fn halide_set_custom_do_par_for(par_for_fn);
extern int halide_do_par_for(void *user_context, task_fn fn, int min, int size,
                             uint8_t *closure);

/* chain.c: calls kernel `f` with `nargs` buffer pointers from `args`; -1 for more than any
 * template passes. */
int wp_call_kernel(void *f, int nargs, void *const *args);

/* spin_pool.c: runs n independent kernels at the same time on the pool (a stage of a
 * parallel schedule); 0, or a failing kernel's error code with its index in *failed. */
int wp_run_stage(int n, void *const *fns, const int *nargs, void *const *args, int *failed);

#endif
