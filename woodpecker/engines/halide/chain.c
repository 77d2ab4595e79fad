/* Runs a chain of Halide kernels bound to fixed buffers (a plan's consecutive Halide steps over
 * its arena) in one foreign call: Python then pays one ctypes call per chain instead of one
 * per kernel (aot.BoundCall.chain). Kernel i is fns[i], called with nargs[i] buffer pointers
 * taken in order from args. Returns 0, or the failing kernel's error code with its index in
 * *failed. */

typedef void *p;

int wp_run_chain(int n, void *const *fns, const int *nargs, p const *args, int *failed) {
    for (int i = 0; i < n; i++) {
        const p *a = args;
        void *f = fns[i];
        int rc;
        switch (nargs[i]) {
        case 1: rc = ((int (*)(p))f)(a[0]); break;
        case 2: rc = ((int (*)(p, p))f)(a[0], a[1]); break;
        case 3: rc = ((int (*)(p, p, p))f)(a[0], a[1], a[2]); break;
        case 4: rc = ((int (*)(p, p, p, p))f)(a[0], a[1], a[2], a[3]); break;
        case 5: rc = ((int (*)(p, p, p, p, p))f)(a[0], a[1], a[2], a[3], a[4]); break;
        case 6: rc = ((int (*)(p, p, p, p, p, p))f)(a[0], a[1], a[2], a[3], a[4], a[5]); break;
        case 7: rc = ((int (*)(p, p, p, p, p, p, p))f)(a[0], a[1], a[2], a[3], a[4], a[5],
                                                         a[6]); break;
        case 8: rc = ((int (*)(p, p, p, p, p, p, p, p))f)(a[0], a[1], a[2], a[3], a[4], a[5],
                                                            a[6], a[7]); break;
        default: rc = -1; break;   /* more arguments than any template passes */
        }
        if (rc) {
            *failed = i;
            return rc;
        }
        args += nargs[i];
    }
    return 0;
}
