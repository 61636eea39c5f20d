// twoproc.cuh: no measurement; what the probes that run one process per GPU share
// (ipcev.cu, mix.cu, ar2.cu): a barrier between the two hosts, main's setup
// of a shared page and a socket pair before the fork, and the exchange of
// IPC handles over that socket. S is the probe's shared struct: zeroed,
// mapped into both processes, with a std::atomic<int> barrier[2].
#pragma once

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>

#include "check.cuh"

// host_barrier returns once both processes reached their gen-th barrier;
// after a minute it ends this process, so that a peer that died (a crash
// the parent does not see until waitpid) cannot leave it spinning.
template <typename S>
void host_barrier(S* sh, int g, int& gen) {
  gen++;
  sh->barrier[g].store(gen);
  const time_t start = time(nullptr);
  while (sh->barrier[1 - g].load() < gen) {
    if (time(nullptr) - start > 60) {
      fprintf(stderr, "process %d: the peer never reached barrier %d\n", g, gen);
      _exit(4);
    }
  }
}

// two_processes runs run(0, ...) here and run(1, ...) in a child, each with
// its end of a socket pair and the shared page; non-zero if either failed.
template <typename S>
int two_processes(const char* name, int (*run)(int g, int sock, S* sh)) {
  auto* sh = (S*)mmap(nullptr, sizeof(S), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    fprintf(stderr, "%s: mmap failed\n", name);
    return 1;
  }
  memset((void*)sh, 0, sizeof(S));
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
    fprintf(stderr, "%s: socketpair failed\n", name);
    return 1;
  }
  pid_t child = fork();
  if (child == 0) _exit(run(1, sv[1], sh));
  const int rc = run(0, sv[0], sh);
  int st = 0;
  waitpid(child, &st, 0);
  return rc || !WIFEXITED(st) || WEXITSTATUS(st);
}

// swap_with_peer sends this process's value to the peer over the socket
// pair and reads the peer's into theirs; false (after perror) on a failed
// socket.
template <typename T>
bool swap_with_peer(const char* what, int sock, const T& mine, T& theirs) {
  if (write(sock, &mine, sizeof mine) == sizeof mine && read(sock, &theirs, sizeof theirs) == sizeof theirs) return true;
  perror(what);
  return false;
}

// export_mem is a device buffer's IPC handle; open_mem maps the peer's.
inline cudaIpcMemHandle_t export_mem(void* p) {
  cudaIpcMemHandle_t h;
  CK(cudaIpcGetMemHandle(&h, p));
  return h;
}
template <typename T>
T* open_mem(const cudaIpcMemHandle_t& h) {
  void* p = nullptr;
  CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  return (T*)p;
}
