/* A stand-in for libcuda.so.1 on machines without an NVIDIA driver: the driver API calls
   woodpecker/gpu/driver.py makes, answering for one H100 (data-sheet facts), so the ctypes
   binding's calls, argument types and attribute codes are exercised on CPU-only CI. The real
   driver is exercised on the device (issue 54's device script). */
#include <stddef.h>
#include <string.h>

int cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
int cuDeviceGetCount(int *count) { *count = 1; return 0; }
int cuDeviceGet(int *device, int ordinal) { if (ordinal != 0) return 101; *device = 0; return 0; }
int cuDeviceGetName(char *name, int len, int device) {
    strncpy(name, "NVIDIA H100 80GB HBM3", (size_t)len);
    return device == 0 ? 0 : 101;
}
int cuDeviceTotalMem_v2(size_t *bytes, int device) {
    *bytes = (size_t)85520809984ULL;
    return device == 0 ? 0 : 101;
}
int cuDeviceGetAttribute(int *value, int attribute, int device) {
    switch (attribute) {
    case 1: *value = 1024; break;         /* max threads per block */
    case 8: *value = 49152; break;        /* shared memory per block */
    case 10: *value = 32; break;          /* warp */
    case 12: *value = 65536; break;       /* registers per block */
    case 16: *value = 132; break;         /* SMs */
    case 38: *value = 52428800; break;    /* L2 bytes */
    case 75: *value = 9; break;           /* capability major */
    case 76: *value = 0; break;           /* minor */
    case 97: *value = 232448; break;      /* opt-in shared memory per block */
    default: return 1;                    /* CUDA_ERROR_INVALID_VALUE */
    }
    return device == 0 ? 0 : 101;
}
