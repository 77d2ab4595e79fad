/* Woodpecker's thread pool for Halide's parallel loops, installed in place of Halide's own
 * with halide_set_custom_do_par_for (aot.set_threads; why: see SPIN_US in aot.py).
 *
 * One loop at a time: the calling thread publishes it by making `generation` odd, then it and
 * the workers claim iterations, each first from its own contiguous share of the loop (see
 * run_tasks) and then from the others'; when none are left it makes `generation`
 * even again (closed: no worker joins any more) and waits for the workers still inside. A
 * worker that finds no new loop spins for `spin_ns` (checking `generation`, yielding its core
 * now and then) and only then sleeps on a futex, so the next kernel of a plan, microseconds
 * later, finds it awake. A nested parallel loop, or one started while another thread's loop
 * runs, runs serially on its caller: correct, and never blocking. `wp_spin_pool_rest` sends
 * spinning workers to sleep at once: a plan calls it before a library step (ONNX Runtime
 * spins its own workers), which a spinning Halide worker would otherwise rob of a core. */

#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "wp_runtime.h"

#define MAX_WORKERS 255
/* Pause instructions (~20 ns each on Zen 4) the caller spins for its workers before yielding. */
#define JOIN_SPINS 2000
/* A join counted as long (wp_spin_pool_join_stats): more than a worker finishing an iteration
 * it runs takes, i.e. a worker the host preempted. */
#define LONG_JOIN_NS 50000L

static struct {
    pthread_mutex_t busy;  /* held by the thread whose loop is published */
    int workers;           /* worker threads started */
    int wanted;            /* workers that take part (threads - 1) */
    long spin_ns;
    /* the published loop */
    task_fn fn;
    void *user_context;
    uint8_t *closure;
    int min, size;
    int error, active;
    int split;             /* loop iterations in contiguous shares, one per thread (see below) */
    uint32_t generation;
    int sleepers;
    uint32_t rest;         /* bumped by wp_spin_pool_rest: stop spinning */
    int used;              /* participants that ran an iteration of the current loop */
    int max_used;          /* the most of them in one loop since wp_spin_pool_used(1) */
    long join_ns;          /* time callers waited for workers still inside a closed loop */
    long long_joins;       /* loops whose join waited more than LONG_JOIN_NS */
} pool = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};

/* Per participant (0: the caller, 1..: workers) the next and end iteration of its share, each
 * on its own cache line. */
static struct { int next, end; char pad[56]; } share[MAX_WORKERS + 1];

static __thread int inside_task;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int run_share(int t) {
    int i, ran = 0;
    while ((i = __atomic_fetch_add(&share[t].next, 1, __ATOMIC_ACQ_REL)) < share[t].end) {
        ran = 1;
        if (!__atomic_load_n(&pool.error, __ATOMIC_RELAXED)) {
            int rc = pool.fn(pool.user_context, pool.min + i, pool.closure);
            if (rc) __atomic_store_n(&pool.error, rc, __ATOMIC_RELAXED);
        }
    }
    return ran;
}

/* Participant `self` runs its own share, then helps with the others' (a worker that joins
 * late, or a core the host took away, delays nothing). Consecutive kernels split alike (rows,
 * pixels or channel tiles in equal contiguous shares), so each thread mostly reads what it
 * wrote itself, from its own core's cache. Measured on mobilenet_v2's all-Halide plan against
 * claiming every iteration from one shared counter (either thread took any index): 7.45 vs
 * 8.02 ms, 9.08 vs 11.09 ms in a slower phase; the stride-2 depthwise conv at 56² went
 * 0.475 -> 0.259 ms, the 32->16 projection at 112² 0.309 -> 0.141 ms. */
static void run_tasks(int self) {
    int n = pool.split, ran = 0;
    inside_task = 1;
    for (int k = 0; k < n; k++) ran |= run_share((self + k) % n);
    inside_task = 0;
    if (ran) __atomic_fetch_add(&pool.used, 1, __ATOMIC_RELAXED);
}

/* Wait until `generation` moves past `seen`: spin, then sleep. Returns the new generation. */
static uint32_t wait_for_job(uint32_t seen) {
    uint32_t g;
    uint32_t rest = __atomic_load_n(&pool.rest, __ATOMIC_ACQUIRE);
    long start = now_ns();
    unsigned spins = 0;
    while ((g = __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE)) == seen) {
        if (__atomic_load_n(&pool.rest, __ATOMIC_RELAXED) != rest) break;
        if (++spins % 64 == 0) {
            if (now_ns() - start > pool.spin_ns) break;
            sched_yield();
        }
        __builtin_ia32_pause();
    }
    while (g == seen) {
        __atomic_fetch_add(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&pool.generation, __ATOMIC_SEQ_CST) == seen)
            syscall(SYS_futex, &pool.generation, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
        __atomic_fetch_sub(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
        g = __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE);
    }
    return g;
}

static void *worker(void *arg) {
    int index = (int)(intptr_t)arg;
    uint32_t seen = __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE);
    for (;;) {
        uint32_t g = wait_for_job(seen);
        seen = g;
        if (!(g & 1) || index >= __atomic_load_n(&pool.wanted, __ATOMIC_RELAXED)) continue;
        /* Join only while the loop seen is still open: once the caller has closed it, it
         * waits for `active` to drop to zero and may then rewrite the loop's fields. */
        __atomic_fetch_add(&pool.active, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&pool.generation, __ATOMIC_SEQ_CST) == g) run_tasks(index + 1);
        __atomic_fetch_sub(&pool.active, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* The caller waits for workers still inside the closed loop: each is finishing the one
 * iteration it claimed. Spin briefly (the usual case: it ends within microseconds), then yield
 * the core: on a busy machine the host may have preempted that worker, and a caller spinning
 * on its core keeps the worker — or the process that preempted it — from running there. */
static void wait_for_workers(void) {
    unsigned spins = 0;
    while (__atomic_load_n(&pool.active, __ATOMIC_ACQUIRE) > 0) {
        if (++spins > JOIN_SPINS) sched_yield();
        else __builtin_ia32_pause();
    }
}

static int serial(void *user_context, task_fn fn, int min, int size, uint8_t *closure) {
    for (int i = 0; i < size; i++) {
        int rc = fn(user_context, min + i, closure);
        if (rc) return rc;
    }
    return 0;
}

static int do_par_for(void *user_context, task_fn fn, int min, int size, uint8_t *closure) {
    if (size <= 1 || inside_task ||
        __atomic_load_n(&pool.wanted, __ATOMIC_RELAXED) == 0 ||
        pthread_mutex_trylock(&pool.busy))
        return serial(user_context, fn, min, size, closure);
    pool.fn = fn;
    pool.user_context = user_context;
    pool.closure = closure;
    pool.min = min;
    pool.size = size;
    pool.error = 0;
    pool.used = 0;
    int n = __atomic_load_n(&pool.wanted, __ATOMIC_RELAXED) + 1;
    pool.split = n;
    for (int t = 0; t < n; t++) {
        share[t].next = (int)((long)size * t / n);
        share[t].end = (int)((long)size * (t + 1) / n);
    }
    __atomic_fetch_add(&pool.generation, 1, __ATOMIC_SEQ_CST);   /* odd: open */
    if (__atomic_load_n(&pool.sleepers, __ATOMIC_SEQ_CST) > 0)
        syscall(SYS_futex, &pool.generation, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    run_tasks(0);
    __atomic_fetch_add(&pool.generation, 1, __ATOMIC_SEQ_CST);   /* even: closed */
    if (__atomic_load_n(&pool.active, __ATOMIC_ACQUIRE) > 0) {
        long t0 = now_ns();
        wait_for_workers();
        long waited = now_ns() - t0;
        pool.join_ns += waited;
        if (waited > LONG_JOIN_NS) pool.long_joins++;
    }
    int error = pool.error;
    int used = __atomic_load_n(&pool.used, __ATOMIC_RELAXED);
    if (used > pool.max_used) pool.max_used = used;
    pthread_mutex_unlock(&pool.busy);
    return error;
}

/* The thread count parallel loops run on now (the caller and the workers taking part). */
int wp_spin_pool_threads(void) { return __atomic_load_n(&pool.wanted, __ATOMIC_RELAXED) + 1; }

/* The most threads that ran iterations of one parallel loop since the last reset (reset
 * when `reset`): what a run actually used, for tests of per-model thread counts. */
int wp_spin_pool_used(int reset) {
    pthread_mutex_lock(&pool.busy);
    int used = pool.max_used;
    if (reset) pool.max_used = 0;
    pthread_mutex_unlock(&pool.busy);
    return used;
}

/* The time callers waited at loop ends for workers still finishing an iteration, and how many
 * of those waits were long (a preempted worker), since the last reset (reset when `reset`). */
void wp_spin_pool_join_stats(long *ns, long *long_joins, int reset) {
    pthread_mutex_lock(&pool.busy);
    *ns = pool.join_ns;
    *long_joins = pool.long_joins;
    if (reset) pool.join_ns = pool.long_joins = 0;
    pthread_mutex_unlock(&pool.busy);
}

/* A stage of a parallel schedule (schedule/dos.py, DOS's concurrent strategy): n independent
 * kernels, kernel i being fns[i] called with nargs[i] buffer pointers taken in order from
 * args. They run as the n iterations of one parallel loop on the pool, so each runs on one
 * thread with its own parallel loops serial (a nested loop, `inside_task`): on T threads the
 * caller starts with the first n/T kernels, each worker with its share, and whoever is done
 * takes the kernels not started yet; a stage of one kernel runs it on the calling thread alone
 * (its time on one core). Returns 0, or a failing kernel's error code with its
 * index in *failed. */
#define STAGE_MAX 64
struct stage { void *const *fns; const int *nargs; void *const *argv[STAGE_MAX]; int failed; };

static int stage_member(void *user_context, int i, uint8_t *closure) {
    struct stage *s = (struct stage *)closure;
    int rc = wp_call_kernel(s->fns[i], s->nargs[i], s->argv[i]);
    if (rc) __atomic_store_n(&s->failed, i, __ATOMIC_RELAXED);
    return rc;
}

int wp_run_stage(int n, void *const *fns, const int *nargs, void *const *args, int *failed) {
    struct stage s;
    if (n > STAGE_MAX) return -1;
    s.fns = fns;
    s.nargs = nargs;
    s.failed = 0;
    for (int i = 0; i < n; i++) {
        s.argv[i] = args;
        args += nargs[i];
    }
    int rc;
    if (n == 1) {   /* one kernel alone on the calling thread: its time on one core */
        int was = inside_task;
        inside_task = 1;
        rc = stage_member(NULL, 0, (uint8_t *)&s);
        inside_task = was;
    } else {
        rc = do_par_for(NULL, stage_member, 0, n, (uint8_t *)&s);
    }
    *failed = s.failed;
    return rc;
}

/* Send the workers spinning for a next loop to sleep now (they wake for the next loop). */
void wp_spin_pool_rest(void) { __atomic_fetch_add(&pool.rest, 1, __ATOMIC_RELEASE); }

/* Run every parallel loop on `threads` threads (the caller and threads - 1 workers, started
 * on first need; fewer than started leaves the rest idle); workers spin `spin_us` microseconds
 * for the next loop before sleeping. Returns 0, or pthread_create's error (the workers started
 * so far then serve). */
int wp_spin_pool_install(int threads, int spin_us) {
    int workers = threads - 1, rc = 0;
    if (workers < 0) workers = 0;
    if (workers > MAX_WORKERS) workers = MAX_WORKERS;
    pthread_mutex_lock(&pool.busy);
    pool.spin_ns = (long)spin_us * 1000L;
    while (pool.workers < workers) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &attr, worker, (void *)(intptr_t)pool.workers);
        pthread_attr_destroy(&attr);
        if (rc) break;
        pool.workers++;
    }
    __atomic_store_n(&pool.wanted, workers < pool.workers ? workers : pool.workers,
                     __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pool.busy);
    halide_set_custom_do_par_for(do_par_for);
    return rc;
}
