/* Runs one TVM-compiled kernel (an object file with the TVM FFI packed calling convention)
 * outside TVM's runtime, for CPUs this machine cannot run natively (aarch64 under
 * qemu-user). Serial: a parallel loop runs as one task.
 *
 *   call_kernel OUT IN1 [IN2 ...]
 * Each tensor is FILE:CODE:BITS:D0xD1x... (DLPack dtype code: 0 int, 1 uint, 2 float); the
 * inputs are read from their files, the kernel's last argument (OUT) is written to its file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tvm/ffi/c_api.h"

extern int __tvm_ffi_kernel(void *self, const TVMFFIAny *args, int32_t num_args,
                            TVMFFIAny *result);

typedef struct {
  void *sync_handle;
  int32_t num_task;
} ParallelEnv;
typedef int (*ParallelLambda)(int task_id, ParallelEnv *env, void *cdata);

static int parallel_launch(ParallelLambda lambda, void *cdata, int num_task) {
  ParallelEnv env = {NULL, 1};
  (void)num_task;
  return lambda(0, &env, cdata);
}
static void *alloc_workspace(int device_type, int device_id, uint64_t size, int code, int bits) {
  (void)device_type, (void)device_id, (void)code, (void)bits;
  return malloc(size);
}
static int free_workspace(int device_type, int device_id, void *ptr) {
  (void)device_type, (void)device_id;
  free(ptr);
  return 0;
}
extern void *__TVMBackendParallelLaunch, *__TVMBackendAllocWorkspace, *__TVMBackendFreeWorkspace;

void TVMFFIErrorSetRaisedFromCStrParts(const char *kind, const char **parts, int32_t n) {
  fprintf(stderr, "%s:", kind);
  for (int32_t i = 0; i < n; ++i) fprintf(stderr, " %s", parts[i]);
  fprintf(stderr, "\n");
}

typedef struct {
  DLTensor tensor;
  int64_t shape[8];
  const char *path;
  size_t bytes;
} Arg;

static void parse(const char *spec, Arg *arg) {
  char *copy = strdup(spec), *save = NULL;
  arg->path = strtok_r(copy, ":", &save);
  arg->tensor.dtype.code = (uint8_t)atoi(strtok_r(NULL, ":", &save));
  arg->tensor.dtype.bits = (uint8_t)atoi(strtok_r(NULL, ":", &save));
  arg->tensor.dtype.lanes = 1;
  arg->tensor.ndim = 0;
  arg->bytes = arg->tensor.dtype.bits / 8;
  for (char *d = strtok_r(strtok_r(NULL, ":", &save), "x", &save); d; d = strtok_r(NULL, "x", &save)) {
    arg->shape[arg->tensor.ndim++] = atoll(d);
    arg->bytes *= (size_t)atoll(d);
  }
  arg->tensor.shape = arg->shape;
  arg->tensor.device.device_type = kDLCPU;
  arg->tensor.data = calloc(1, arg->bytes);
}

int main(int argc, char **argv) {
  int n = argc - 1;
  Arg *args = calloc((size_t)n, sizeof(Arg));
  TVMFFIAny *packed = calloc((size_t)n, sizeof(TVMFFIAny));
  __TVMBackendParallelLaunch = (void *)parallel_launch;
  __TVMBackendAllocWorkspace = (void *)alloc_workspace;
  __TVMBackendFreeWorkspace = (void *)free_workspace;
  for (int i = 0; i < n; ++i) { /* argv[1] is the output, passed last */
    Arg *arg = &args[i];
    parse(argv[i == n - 1 ? 1 : i + 2], arg);
    if (i < n - 1) {
      FILE *f = fopen(arg->path, "rb");
      if (!f || fread(arg->tensor.data, 1, arg->bytes, f) != arg->bytes) return 2;
      fclose(f);
    }
    packed[i].type_index = kTVMFFIDLTensorPtr;
    packed[i].v_ptr = &arg->tensor;
  }
  TVMFFIAny result = {0};
  if (__tvm_ffi_kernel(NULL, packed, n, &result) != 0) return 3;
  FILE *f = fopen(args[n - 1].path, "wb");
  if (!f || fwrite(args[n - 1].tensor.data, 1, args[n - 1].bytes, f) != args[n - 1].bytes) return 4;
  return fclose(f) ? 4 : 0;
}
