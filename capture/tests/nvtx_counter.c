/* An NVTX injection library that records every range pushed, so a test can show that capture
 * emits NVTX ranges (Nsight Systems cannot write reports on the GPU machines).
 *
 *   gcc -shared -fPIC -O2 -o libnvtx_counter.so nvtx_counter.c -lpthread
 *   NVTX_INJECTION64_PATH=$PWD/libnvtx_counter.so NVTX_COUNTER_OUT=ranges.txt <program>
 *
 * At exit it writes one line per pushed range name ("count<TAB>name"), plus "pushes" and "pops"
 * totals. Self-contained: it declares the few NVTX injection types it needs (nvtxTypes.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer** NvtxFunctionTable;
typedef struct {
  size_t struct_size;
  int (*GetModuleFunctionTable)(int module, NvtxFunctionTable* out_table, unsigned int* out_size);
} NvtxExportTableCallbacks;
typedef const void* (*NvtxGetExportTableFunc_t)(uint32_t exportTableId);

enum { ETID_CALLBACKS = 1, MODULE_CORE = 1, CBID_RANGE_PUSH_EX = 8, CBID_RANGE_PUSH_A = 9, CBID_RANGE_POP = 11 };

/* nvtxEventAttributes_v2: version, size, category, colorType, color, payloadType, reserved0,
 * payload (8 bytes), messageType, message (8 bytes). Only the ASCII message is read. */
typedef struct {
  uint16_t version, size;
  uint32_t category;
  int32_t colorType;
  uint32_t color;
  int32_t payloadType, reserved0;
  uint64_t payload;
  int32_t messageType;
  const char* message;
} Attributes;

#define SLOTS 65536
static struct { char* name; long count; } table[SLOTS];
static long pushes, pops;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void record(const char* msg) {
  if (!msg) msg = "(null)";
  /* Names carry " seq=N"; count them by the op name alone. */
  size_t len = strcspn(msg, " ");
  if (strncmp(msg, "steptrace.", 10) == 0 || strncmp(msg, "ProfilerStep#", 13) == 0) len = strlen(msg);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)msg[i]) * 1099511628211ULL;
  pthread_mutex_lock(&mu);
  pushes++;
  for (size_t i = 0; i < SLOTS; i++) {
    size_t s = (h + i) % SLOTS;
    if (!table[s].name) {
      table[s].name = strndup(msg, len);
      table[s].count = 1;
      break;
    }
    if (strlen(table[s].name) == len && strncmp(table[s].name, msg, len) == 0) {
      table[s].count++;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
}

static int push_a(const char* msg) { record(msg); return 0; }
static int push_ex(const Attributes* a) { record(a && a->messageType == 1 ? a->message : "(non-ascii)"); return 0; }
static int pop(void) { __atomic_add_fetch(&pops, 1, __ATOMIC_RELAXED); return 0; }

static void dump(void) {
  const char* path = getenv("NVTX_COUNTER_OUT");
  FILE* f = path ? fopen(path, "a") : stderr;
  if (!f) return;
  fprintf(f, "pushes\t%ld\npops\t%ld\n", pushes, pops);
  for (size_t i = 0; i < SLOTS; i++)
    if (table[i].name) fprintf(f, "%ld\t%s\n", table[i].count, table[i].name);
  if (f != stderr) fclose(f);
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  const NvtxExportTableCallbacks* cb = (const NvtxExportTableCallbacks*)get(ETID_CALLBACKS);
  if (!cb) return 0;
  NvtxFunctionTable t = 0;
  unsigned int size = 0;
  if (!cb->GetModuleFunctionTable(MODULE_CORE, &t, &size) || !t) return 0;
  if (size > CBID_RANGE_POP) {
    *t[CBID_RANGE_PUSH_A] = (NvtxFunctionPointer)push_a;
    *t[CBID_RANGE_PUSH_EX] = (NvtxFunctionPointer)push_ex;
    *t[CBID_RANGE_POP] = (NvtxFunctionPointer)pop;
  }
  /* Each library with its own copy of the NVTX header initialises injection once. */
  static int registered;
  if (!__atomic_exchange_n(&registered, 1, __ATOMIC_SEQ_CST)) atexit(dump);
  return 1;
}
