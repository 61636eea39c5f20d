/*
 * ncclcheck.h: what the files of ncclcheck (ncclcheck.c, ncclcheck_premul.c)
 * share: the rank, the check macros, the element types and the data.
 */
#ifndef NCCLCHECK_H
#define NCCLCHECK_H
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#include "nccl.h"

extern int rank, nranks, failures;

#define CHECK(name, cond, ...)                  \
  do {                                          \
    if (cond) {                                 \
      printf("ok %s\n", name);                  \
    } else {                                    \
      printf("FAIL %s: ", name);                \
      printf(__VA_ARGS__);                      \
      printf("\n");                             \
      failures++;                               \
    }                                           \
  } while (0)

#define MUST(call)                                                                                  \
  do {                                                                                              \
    ncclResult_t r_ = (call);                                                                       \
    if (r_ != ncclSuccess) {                                                                        \
      printf("FAIL %s:%d %s: %s (%d): %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_), r_, \
             ncclGetLastError(NULL));                                                               \
      exit(1);                                                                                      \
    }                                                                                               \
  } while (0)

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- id exchange ---- */

static void id_path(char* buf, size_t n, const char* tag) {
  const char* dir = getenv("NCCLCHECK_DIR");
  snprintf(buf, n, "%s/id.%s", dir ? dir : "/tmp", tag);
}

static ncclUniqueId share_id(const char* tag) {
  ncclUniqueId id;
  char path[512], tmp[600];
  id_path(path, sizeof path, tag);
  if (rank == 0) {
    MUST(ncclGetUniqueId(&id));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      printf("FAIL writing %s: %s\n", path, strerror(errno));
      exit(1);
    }
    return id;
  }
  for (int i = 0; i < 60000; i++) {
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
    sleep_ms(5);
  }
  printf("FAIL no id at %s\n", path);
  exit(1);
}

static ncclComm_t init_comm(const char* tag) {
  ncclUniqueId id = share_id(tag);
  ncclComm_t c = NULL;
  MUST(ncclCommInitRank(&c, nranks, id, rank));
  return c;
}

typedef struct {
  ncclDataType_t t;
  const char* name;
  size_t size;
  int isfloat, isunsigned;
} dtype;

extern const dtype dtypes[];
extern const size_t ndtypes;

uint64_t mix(uint64_t x);
double value(int seed, int r, size_t i, int prod, int isunsigned);
void put(const dtype* d, void* buf, size_t i, double v);
double get(const dtype* d, const void* buf, size_t i);
void* poisoned(size_t bytes);
void fill(const dtype* d, void* buf, int seed, int r, size_t n, int prod);
void check_premulsum(ncclComm_t comm);

#endif
