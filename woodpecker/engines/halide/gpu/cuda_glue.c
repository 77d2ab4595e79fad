/* Woodpecker's CUDA glue, linked into a GPU plan's runtime library with Halide's CUDA runtime
   (gpu/runtime.py calls it through ctypes): one context (the device's primary context, the
   one PyTorch and the CUDA runtime API use, so tensors and kernels can share memory), the
   stream kernels run on, device memory for the plan's arena and weights, and CUDA events to
   time a run. The driver is opened with dlopen, as Halide's own CUDA runtime does, so
   nothing here needs the CUDA toolkit to build. Every function returns a CUresult (0 =
   success); WP_NO_DRIVER when libcuda cannot be opened. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#define WP_NO_DRIVER 100000

typedef int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef uint64_t CUdeviceptr;

typedef int (*acquire_t)(void *, void **, int);
typedef int (*release_t)(void *);
typedef int (*stream_t)(void *, void *, void **);
extern acquire_t halide_set_cuda_acquire_context(acquire_t handler);
extern release_t halide_set_cuda_release_context(release_t handler);
extern stream_t halide_set_cuda_get_stream(stream_t handler);
extern int halide_reuse_device_allocations(void *user_context, _Bool reuse);

static CUcontext wp_context;
static CUstream wp_stream;

static CUresult (*cuInit_)(unsigned);
static CUresult (*cuDeviceGet_)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain_)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent_)(CUcontext);
static CUresult (*cuCtxSynchronize_)(void);
static CUresult (*cuMemAlloc_)(CUdeviceptr *, size_t);
static CUresult (*cuMemFree_)(CUdeviceptr);
static CUresult (*cuMemGetInfo_)(size_t *, size_t *);
static CUresult (*cuEventCreate_)(CUevent *, unsigned);
static CUresult (*cuEventDestroy_)(CUevent);
static CUresult (*cuEventRecord_)(CUevent, CUstream);
static CUresult (*cuEventSynchronize_)(CUevent);
static CUresult (*cuEventElapsedTime_)(float *, CUevent, CUevent);
static CUresult (*cuStreamCreate_)(CUstream *, unsigned);
static CUresult (*cuStreamWaitEvent_)(CUstream, CUevent, unsigned);

static int acquire(void *user_context, void **ctx, int create) {
    (void)user_context; (void)create;
    *ctx = wp_context;
    return 0;
}

static int release(void *user_context) { (void)user_context; return 0; }

static int get_stream(void *user_context, void *ctx, void **stream) {
    (void)user_context; (void)ctx;
    *stream = wp_stream;
    return 0;
}

#define RESOLVE(name) \
    do { *(void **)(&name##_) = dlsym(lib, #name); if (!name##_) return WP_NO_DRIVER + 1; } \
    while (0)
#define RESOLVE_V2(name) \
    do { *(void **)(&name##_) = dlsym(lib, #name "_v2"); if (!name##_) return WP_NO_DRIVER + 1; } \
    while (0)

int wp_cuda_init(int ordinal) {
    if (wp_context) return 0;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) return WP_NO_DRIVER;
    RESOLVE(cuInit); RESOLVE(cuDeviceGet); RESOLVE(cuDevicePrimaryCtxRetain);
    RESOLVE(cuCtxSetCurrent); RESOLVE(cuCtxSynchronize); RESOLVE_V2(cuMemAlloc);
    RESOLVE_V2(cuMemFree); RESOLVE_V2(cuMemGetInfo); RESOLVE(cuEventCreate);
    RESOLVE_V2(cuEventDestroy); RESOLVE(cuEventRecord); RESOLVE(cuEventSynchronize);
    RESOLVE(cuEventElapsedTime); RESOLVE(cuStreamCreate);
    RESOLVE(cuStreamWaitEvent);
    CUresult rc = cuInit_(0);
    int device = 0;
    if (rc == 0) rc = cuDeviceGet_(&device, ordinal);
    if (rc == 0) rc = cuDevicePrimaryCtxRetain_(&wp_context, device);
    if (rc == 0) rc = cuCtxSetCurrent_(wp_context);
    if (rc != 0) { wp_context = NULL; return rc; }
    halide_set_cuda_acquire_context(acquire);
    halide_set_cuda_release_context(release);
    halide_set_cuda_get_stream(get_stream);
    /* templates with intermediates in device memory (winograd.py's V and M) allocate on
       their first launch only: later ones take the freed blocks back */
    halide_reuse_device_allocations(NULL, 1);
    return 0;
}

int wp_cuda_bind_thread(void) { return cuCtxSetCurrent_(wp_context); }
int wp_cuda_synchronize(void) { return cuCtxSynchronize_(); }
int wp_cuda_alloc(CUdeviceptr *ptr, size_t bytes) { return cuMemAlloc_(ptr, bytes); }
int wp_cuda_free(CUdeviceptr ptr) { return cuMemFree_(ptr); }
int wp_cuda_mem_info(size_t *free_bytes, size_t *total) { return cuMemGetInfo_(free_bytes, total); }
int wp_cuda_event_new(CUevent *event) { return cuEventCreate_(event, 0); }
int wp_cuda_event_free(CUevent event) { return cuEventDestroy_(event); }
int wp_cuda_record(CUevent event) { return cuEventRecord_(event, wp_stream); }

int wp_cuda_elapsed(float *ms, CUevent start, CUevent end) {
    CUresult rc = cuEventSynchronize_(end);
    return rc != 0 ? rc : cuEventElapsedTime_(ms, start, end);
}

/* Kernels run on `stream` from now on (0: the legacy default stream); a CUDA graph's capture
   points them at torch's capturing stream for the length of one walk. */
int wp_cuda_use_stream(CUstream stream) { wp_stream = stream; return 0; }
CUstream wp_cuda_current_stream(void) { return wp_stream; }

/* DOS stages on streams (runtime/gpu_stages.py): fork and join by events. */
int wp_cuda_record_on(CUevent event, CUstream stream) { return cuEventRecord_(event, stream); }
int wp_cuda_wait(CUstream stream, CUevent event) { return cuStreamWaitEvent_(stream, event, 0); }
int wp_cuda_stream_new(CUstream *stream) { return cuStreamCreate_(stream, 1 /* non-blocking */); }
