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
