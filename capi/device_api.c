/*
 * device_api.c: the host functions of NCCL 2.28's device API
 * (nccl_device.h). goccl does not offer the device API: the calls that
 * create device communicators or resources fail with ncclInvalidUsage and
 * a last error naming them. The team queries are plain arithmetic on the
 * communicator's size and rank, answered for what goccl runs on (one node,
 * every rank load-store accessible).
 */
#include <stdint.h>
#include <stdio.h>

#include "nccl.h"
#include "shim.h"
#include "_cgo_export.h"

#define EXPORT __attribute__((visibility("default")))

/* Laid out as NCCL's ncclTeam_t (returned by value). */
typedef struct {
  int nRanks, rank, stride;
} team_t;

static ncclResult_t no_device_api(const char* fn) {
  char text[512];
  snprintf(text, sizeof text,
           GOCCL_LIB_NAME " " GOCCL_LIB_VERSION " (" GOCCL_API_NAME "): %s: the device API is not implemented by goccl", fn);
  goccl_set_last_error(text);
  return ncclInvalidUsage;
}

EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* out) {
  (void)comm, (void)reqs, (void)out;
  return no_device_api("ncclDevCommCreate");
}
EXPORT ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void* devComm) {
  (void)comm, (void)devComm;
  return no_device_api("ncclDevCommDestroy");
}
EXPORT ncclResult_t ncclLsaBarrierCreateRequirement(team_t team, int n, void* handle, void* req) {
  (void)team, (void)n, (void)handle, (void)req;
  return no_device_api("ncclLsaBarrierCreateRequirement");
}
EXPORT ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, team_t team, int n, void* handle, void* req) {
  (void)comm, (void)team, (void)n, (void)handle, (void)req;
  return no_device_api("ncclGinBarrierCreateRequirement");
}
EXPORT ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void* handle, void* req) {
  (void)nBlocks, (void)nSlots, (void)handle, (void)req;
  return no_device_api("ncclLLA2ACreateRequirement");
}
EXPORT int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  (void)maxElts, (void)maxEltSize;
  no_device_api("ncclLLA2ACalcSlots");
  return 0;
}

static team_t world(ncclComm_t comm) {
  team_t t = {0, 0, 1};
  int n = 0, r = 0;
  if (ncclCommCount(comm, &n) == ncclSuccess && ncclCommUserRank(comm, &r) == ncclSuccess) {
    t.nRanks = n;
    t.rank = r;
  }
  return t;
}

EXPORT team_t ncclTeamWorld(ncclComm_t comm) { return world(comm); }
/* One node: every rank is in the load-store team. */
EXPORT team_t ncclTeamLsa(ncclComm_t comm) { return world(comm); }
/* The rail is the team of equal local ranks across nodes: this rank alone. */
EXPORT team_t ncclTeamRail(ncclComm_t comm) {
  team_t w = world(comm), t = {1, 0, w.nRanks > 0 ? w.nRanks : 1};
  return t;
}
EXPORT int ncclTeamRankToWorld(ncclComm_t comm, team_t team, int rank) {
  team_t w = world(comm);
  return w.rank + (rank - team.rank) * team.stride;
}
EXPORT int ncclTeamRankToLsa(ncclComm_t comm, team_t team, int rank) {
  /* The load-store team is the world team here. */
  return ncclTeamRankToWorld(comm, team, rank);
}
EXPORT team_t pncclTeamWorld(ncclComm_t comm) __attribute__((alias("ncclTeamWorld")));
EXPORT team_t pncclTeamLsa(ncclComm_t comm) __attribute__((alias("ncclTeamLsa")));
EXPORT team_t pncclTeamRail(ncclComm_t comm) __attribute__((alias("ncclTeamRail")));
