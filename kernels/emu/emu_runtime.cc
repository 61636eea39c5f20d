// emu_runtime.cc: runs one CUDA kernel launch of one rank on the CPU. Each
// block is a forked process (so `__shared__` statics are per block) running
// blockDim.x std::threads; device memory is a MAP_SHARED mapping made before
// any fork, so every process sees it at the same address. A watchdog alarm
// turns a hang into an exit code the driver reports with the launch's name.
#include "emu.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

thread_local EmuDim3 threadIdx;
EmuDim3 blockIdx, blockDim, gridDim;
int emu_slow_us = 0;

namespace {

pthread_barrier_t g_bar;
char g_label[512];  // "launch ... rank R block B", preformatted for signal handlers
thread_local unsigned g_rng = 0;
thread_local const void* g_last_poll = nullptr;
bool g_jitter = true;
int g_slow_block = -1;  // the one block that is slow (-1: every block)
int g_slow_late_us = 0;  // and starts this late
std::atomic<int> g_reported{0};  // the first faulting thread reports; the others wait for _exit

struct Region {
  char name[48];
  uintptr_t base, size;
};
Region g_regions[3 * goccl::kMaxRanks + 4];
int g_nregions = 0;

void write_str(const char* s) {
  ssize_t n = (ssize_t)strlen(s);
  while (n > 0) {
    ssize_t w = write(2, s, (size_t)n);
    if (w <= 0) return;
    s += w;
    n -= w;
  }
}

void write_hex(uint64_t v) {
  char b[19] = "0x";
  for (int i = 0; i < 16; i++) b[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 15];
  b[18] = 0;
  write_str(b);
}

void write_dec(uint64_t v) {
  char b[24];
  int i = 23;
  b[i] = 0;
  do {
    b[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v && i > 0);
  write_str(b + i);
}

// write_where names the region an address falls in, or the page after it
// (each region is followed by an inaccessible page).
void write_where(uintptr_t a) {
  for (int i = 0; i < g_nregions; i++) {
    const Region& r = g_regions[i];
    if (a >= r.base && a < r.base + r.size + 4096) {
      write_str(" (");
      write_str(r.name);
      write_str(a < r.base + r.size ? " + " : " end + ");
      write_dec(a < r.base + r.size ? a - r.base : a - r.base - r.size);
      write_str(")");
      return;
    }
  }
}

// first_report returns to the first thread of the process to report a
// fault; later ones wait to be ended by its _exit, so that messages do not
// interleave.
void first_report() {
  if (g_reported.exchange(1) == 0) return;
  for (;;) pause();
}

void on_alarm(int) {
  first_report();
  write_str("EMU-TIMEOUT ");
  write_str(g_label);
  write_str(": the block did not finish (deadlock?)\n");
  _exit(kExitTimeout);
}

void on_fault(int sig, siginfo_t* si, void*) {
  first_report();
  write_str(sig == SIGSEGV ? "EMU-CRASH SIGSEGV " : sig == SIGBUS ? "EMU-CRASH SIGBUS " : "EMU-CRASH signal ");
  write_str(g_label);
  write_str(" thread ");
  write_hex(threadIdx.x);
  write_str(" address ");
  write_hex((uint64_t)si->si_addr);
  write_where((uintptr_t)si->si_addr);
  write_str("\n");
  _exit(kExitCrash);
}

unsigned next_rand() {
  if (g_rng == 0) g_rng = (unsigned)getpid() * 2654435761u + threadIdx.x * 40503u + 1;
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 17;
  g_rng ^= g_rng << 5;
  return g_rng;
}

[[noreturn]] void run_block(const std::function<void()>& body, int block, int grid, int threads, int timeout_s) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  blockIdx = {(unsigned)block, 0, 0};
  if (g_slow_block >= 0 && block != g_slow_block) emu_slow_us = 0;
  if (g_slow_block == block && emu_slow_us) usleep((useconds_t)g_slow_late_us);  // (its SM was busy)
  gridDim = {(unsigned)grid, 1, 1};
  blockDim = {(unsigned)threads, 1, 1};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
  sigaction(SIGFPE, &sa, nullptr);
  sigaction(SIGABRT, &sa, nullptr);
  signal(SIGALRM, on_alarm);
  alarm((unsigned)timeout_s);
  pthread_barrier_init(&g_bar, nullptr, (unsigned)threads);
  std::vector<std::thread> ts;
  ts.reserve((size_t)threads);
  for (int t = 1; t < threads; t++)
    ts.emplace_back([&body, t] {
      threadIdx = {(unsigned)t, 0, 0};
      body();
    });
  threadIdx = {0, 0, 0};
  body();
  for (auto& t : ts) t.join();
  _exit(0);
}

}  // namespace

void emu_bar_sync() {
  if (g_jitter && (next_rand() & 31) == 0) sched_yield();
  pthread_barrier_wait(&g_bar);
}

void emu_poll_pause(const void* p) {
  if (p == g_last_poll) sched_yield();
  g_last_poll = p;
}

void emu_jitter() {
  if (g_jitter && (next_rand() & 7) == 0) sched_yield();
}

void emu_misaligned(const void* p, int width) {
  first_report();
  char b[64];
  snprintf(b, sizeof b, "EMU-MISALIGNED %d-byte access ", width);
  write_str(b);
  write_str(g_label);
  write_str(" thread ");
  write_hex(threadIdx.x);
  write_str(" address ");
  write_hex((uint64_t)p);
  write_where((uintptr_t)p);
  write_str("\n");
  _exit(kExitMisaligned);
}

void emu_set_jitter(bool on) { g_jitter = on; }

// emu_slow: a slow reader sleeps before one load in two, so that its
// peers finish a launch and start writing the next one while it still
// reads this one's data (a GPU that is busy or throttled). A single slow
// block (its SM busy with other work) sleeps before every load, so that
// the other blocks of its launch run well ahead of it.
void emu_slow() {
  if (g_slow_block >= 0 || (next_rand() & 1) == 0) usleep((useconds_t)emu_slow_us);
}

void* emu_dyn_smem = nullptr;
unsigned emu_dyn_smem_bytes = 0;

// emu_set_dyn_smem gives the next launches bytes of dynamic shared memory,
// filled with a pattern, so that a thread reading an entry nobody wrote
// gets garbage that the result check catches. Each block process gets its
// own copy at fork.
void emu_set_dyn_smem(unsigned bytes) {
  free(emu_dyn_smem);
  emu_dyn_smem = nullptr;
  emu_dyn_smem_bytes = bytes;
  if (bytes == 0) return;
  emu_dyn_smem = aligned_alloc(16, (bytes + 15) & ~15u);
  if (emu_dyn_smem == nullptr) {
    perror("emu: dynamic shared memory");
    abort();
  }
  memset(emu_dyn_smem, 0xA5, bytes);
}

void emu_set_slow(int us, int block, int lateUs) {
  emu_slow_us = us;
  g_slow_block = block;
  g_slow_late_us = lateUs;
}

pid_t emu_spawn(const std::function<int()>& f) {
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int rc = f();
    fflush(stdout);
    _exit(rc);
  }
  if (pid < 0) perror("emu: fork");
  return pid;
}

// emu_kill_all kills the processes in pids and waits for them (a fork
// failed before all of a launch's or a scenario's processes started).
static void emu_kill_all(const std::vector<pid_t>& pids) {
  for (pid_t k : pids) kill(k, SIGKILL);
  for (pid_t k : pids) waitpid(k, nullptr, 0);
}

bool emu_run_ranks(int nranks, const std::function<int(int)>& rank, const std::function<void()>& dump,
                   const std::string& name, size_t n, const char* what) {
  const double t0 = emu_now();
  std::vector<pid_t> drivers;
  for (int r = 0; r < nranks; r++) {
    const pid_t pid = emu_spawn([&] { return rank(r); });
    if (pid < 0) {
      emu_kill_all(drivers);
      return false;
    }
    drivers.push_back(pid);
  }
  bool fatal = false;
  const bool ok = emu_wait_drivers(drivers, &fatal);
  if (fatal) dump();
  printf("%s %s: %zu %s on %d ranks in %.1f s\n", ok ? "PASS" : "FAIL", name.c_str(), n, what, nranks, emu_now() - t0);
  fflush(stdout);
  return ok;
}

char* emu_map_shared(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("emu: mmap");
    return nullptr;
  }
  return (char*)p;
}

size_t emu_page_size() { return (size_t)sysconf(_SC_PAGESIZE); }

char* emu_map_ranks(int n, const std::vector<EmuRegion>& regions, size_t* size) {
  const size_t pg = emu_page_size();
  size_t per = 0;
  for (const EmuRegion& g : regions) per += g.bytes + pg;
  *size = 2 * pg + n * per;
  char* base = emu_map_shared(*size);
  if (!base) return nullptr;
  char* p = base + pg;
  mprotect(p, pg, PROT_NONE);
  p += pg;
  emu_clear_regions();
  for (int rank = 0; rank < n; rank++) {
    for (const EmuRegion& g : regions) {
      g.at[rank] = p;
      emu_name_region(("rank " + std::to_string(rank) + " " + g.name).c_str(), p, g.bytes);
      p += g.bytes;
      mprotect(p, pg, PROT_NONE);
      p += pg;
    }
  }
  return base;
}

double emu_now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

void emu_name_region(const char* name, const void* base, uint64_t size) {
  if (g_nregions == (int)(sizeof g_regions / sizeof g_regions[0])) return;
  Region& r = g_regions[g_nregions++];
  snprintf(r.name, sizeof r.name, "%s", name);
  r.base = (uintptr_t)base;
  r.size = size;
}

void emu_clear_regions() { g_nregions = 0; }

int emu_launch(KernelFn fn, const goccl::Params& p, int grid, int threads, int timeout_s, const char* label) {
  return emu_launch_body([fn, &p] { fn(p); }, grid, threads, timeout_s, label);
}

int emu_launch_body(const std::function<void()>& body, int grid, int threads, int timeout_s, const char* label) {
  std::vector<pid_t> kids;
  fflush(stdout);
  fflush(stderr);
  for (int b = 0; b < grid; b++) {
    snprintf(g_label, sizeof g_label, "%s block %d", label, b);
    pid_t pid = fork();
    if (pid < 0) {
      perror("emu: fork");
      emu_kill_all(kids);
      return kExitCrash;
    }
    if (pid == 0) run_block(body, b, grid, threads, timeout_s);
    kids.push_back(pid);
  }
  int worst = 0;
  for (pid_t k : kids) {
    int st = 0;
    while (waitpid(k, &st, 0) < 0 && errno == EINTR) {
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : kExitCrash;
    if (WIFSIGNALED(st)) fprintf(stderr, "EMU-CRASH %s: a block died of signal %d\n", label, WTERMSIG(st));
    if (code != 0 && worst == 0) worst = code;
  }
  return worst;
}

bool emu_wait_drivers(std::vector<pid_t>& drivers, bool* fatal) {
  bool ok = true;
  *fatal = false;
  for (size_t left = drivers.size(); left > 0;) {
    int st = 0;
    const pid_t pid = wait(&st);
    if (pid < 0) break;
    auto it = std::find(drivers.begin(), drivers.end(), pid);
    if (it == drivers.end()) continue;
    *it = 0;
    left--;
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : kExitCrash;
    if (code != kExitOK) ok = false;
    if (code >= kExitTimeout && !*fatal) {
      *fatal = true;  // the others cannot finish without this rank
      usleep(200 * 1000);
      for (pid_t d : drivers)
        if (d > 0) kill(d, SIGKILL);
    }
  }
  return ok;
}
