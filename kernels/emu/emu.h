// emu.h: declarations shared by the CPU emulator's files (emu_runtime.cc,
// emu_check.cc, emu_main.cc, emu_ce.cc, emu_ce_streams.cc). The emulator compiles goccl's real
// kernel sources with g++ -DGOCCL_EMU and runs them on the CPU; see
// emu_main.cc.
#pragma once

#include "cuda_emu.h"
// cuda_emu.h must come first: common.cuh includes prims_emu.h inside namespace goccl.
#include "common.cuh"

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

typedef void (*KernelFn)(goccl::Params);

// Exit codes of a block process (and of a rank's driver).
enum { kExitOK = 0, kExitCheck = 1, kExitTimeout = 10, kExitCrash = 11, kExitMisaligned = 12 };

// emu_launch runs kernel fn with grid blocks of threads threads each, one
// forked process per block, and waits for all of them. It returns kExitOK or
// the first block's failure code (the block has printed why, naming label).
int emu_launch(KernelFn fn, const goccl::Params& p, int grid, int threads, int timeout_s, const char* label);
// emu_launch_body is emu_launch of any kernel: every thread of every block
// runs body (goccl_p2p, whose parameter block is larger than Params).
int emu_launch_body(const std::function<void()>& body, int grid, int threads, int timeout_s, const char* label);
// emu_spawn runs f in a child process (killed when the parent dies), whose
// exit code is what f returns; -1 (after saying why) when fork fails.
pid_t emu_spawn(const std::function<int()>& f);
// emu_wait_drivers reaps the rank driver processes in drivers (zeroing
// each entry as it ends) and reports whether every one exited kExitOK; when
// one hung or crashed it kills the others, which cannot finish without it,
// and sets *fatal.
bool emu_wait_drivers(std::vector<pid_t>& drivers, bool* fatal);
// emu_run_ranks runs a scenario: rank(r) in a driver process of its own
// for each of nranks ranks, waited for (emu_wait_drivers); it calls dump
// when one hung or crashed, prints the scenario's PASS or FAIL line (n
// items of what), and returns whether every driver passed.
bool emu_run_ranks(int nranks, const std::function<int(int)>& rank, const std::function<void()>& dump,
                   const std::string& name, size_t n, const char* what);
// emu_map_shared maps size bytes of zeroed memory that the processes forked
// afterwards share; nullptr (after saying why) when it cannot.
char* emu_map_shared(size_t size);
// emu_round_up rounds a up to a multiple of b; emu_page_size is the page.
inline uint64_t emu_round_up(uint64_t a, uint64_t b) { return (a + b - 1) / b * b; }
size_t emu_page_size();
// EmuRegion is one of every rank's regions: its name in fault messages
// (after "rank N "), its bytes (whole pages) and where each rank's goes.
struct EmuRegion {
  const char* name;
  uint64_t bytes;
  char** at;  // at[rank]
};
// emu_map_ranks maps, shared with the processes forked afterwards, a page
// for the abort flag and then, for each of n ranks, its regions in order,
// each behind an inaccessible guard page, and names them (after clearing
// the names before). It returns the base (the abort flag's page) with the
// mapping's size in *size, or nullptr.
char* emu_map_ranks(int n, const std::vector<EmuRegion>& regions, size_t* size);
// emu_name_region names memory for fault messages (before any fork).
void emu_name_region(const char* name, const void* base, uint64_t size);
void emu_clear_regions();
// emu_set_jitter turns the random yields that perturb interleavings on or off.
void emu_set_jitter(bool on);
// emu_set_slow makes the next launches' loads slow (0: full speed), those
// of every block or of one block only, which then also starts lateUs late.
void emu_set_slow(int us, int block = -1, int lateUs = 0);
// emu_now is a monotonic clock in seconds.
double emu_now();

// EmuOptions are the command line's settings every scenario runs with.
struct EmuOptions {
  int timeout = 30;    // seconds a block (or a copy stream's wait) may take
  uint64_t seed = 1;   // of the scenarios' random choices
  std::string inject;  // a fault on purpose: see injections()
  long limit = -1;     // launches (calls) per scenario; -1: all
};

// injections are the faults -inject takes (emu_main.cc's header says what each breaks).
inline const std::vector<std::string>& injections() {
  static const std::vector<std::string> v = {"corrupt", "hang", "nofreewait", "nolandwait", "earlydata", "shortchunks", "p2pcorrupt", "nostamp", "p2pzcnomap", "p2pnoeager"};
  return v;
}

// The point-to-point scenarios (emu_p2p.cc), by group name.
std::vector<std::string> p2p_groups();
bool p2p_run_group(const std::string& group, const EmuOptions& o);

// The fused group kernel's scenarios (emu_fused.cc), by group name.
std::vector<std::string> fused_groups();
bool fused_run_group(const std::string& group, const EmuOptions& o);

// The one-shot AllToAll's scenarios (emu_alltoall.cc), by group name.
std::vector<std::string> a2a_groups();
bool a2a_run_group(const std::string& group, const EmuOptions& o);

// The copy-engine reductions' scenarios (emu_ce.cc), by group name.
std::vector<std::string> ce_groups();
bool ce_run_group(const std::string& group, const EmuOptions& o);

// ---- collectives, data types and operators ----

enum Family { kAR1, kAR2, kARL, kRED, kRS1, kBC1, kAG1, kNumFamilies };
enum Dt { kI8, kU8, kI32, kU32, kI64, kU64, kF16, kBF16, kF32, kF64, kF8E4M3, kF8E5M2, kNumDts };  // GOCCL_TYPES order
enum OpId { kSum, kProd, kMin, kMax, kAvg, kPreMulSum, kNumOps };  // kernel op order
// The copy-engine reduction has every op but PreMulSum (GOCCL_KERNELS_BUILTIN).
constexpr int kNumCEOps = kPreMulSum;

extern const char* const kFamilyName[kNumFamilies];
extern const char* const kDtName[kNumDts];
extern const int kDtSize[kNumDts];
extern const char* const kOpName[kNumOps];

inline bool family_reduces(int f) { return f <= kRS1; }
inline bool family_has_root(int f) { return f == kRED || f == kBC1; }
// The LL kernel's line buffers: kLLMaxBlocks blocks of kLLSlot bytes (half
// of them data) per (half, source rank); see ll.cu.
constexpr uint64_t kEmuLLSlot = 8 << 10, kEmuLLMaxBlocks = 128, kEmuLLEpochOffset = 96 << 10;

// kernel_for returns the kernel of a family (dt and op only for reductions).
KernelFn kernel_for(int family, int dt, int op);
// ce_kernel_for returns goccl_cereduce_<dt>_<op>.
KernelFn ce_kernel_for(int dt, int op);

// ---- inputs and references (emu_check.cc) ----

uint64_t mix64(uint64_t x);
// gen_elem: raw bits of rank's input element idx of a reduction launch.
uint64_t gen_elem(int dt, int op, uint64_t seed, int rank, uint64_t idx);
// gen_byte: rank's input byte idx of a copy launch (never zero).
uint8_t gen_byte(uint64_t seed, int rank, uint64_t idx);
// decode: an element's value as a double (floats) or its integer value.
double decode_float(int dt, uint64_t bits);

// Expect is the reference result of one output element: the exact bits
// the kernels must produce (integers: exact arithmetic; floats: rank-order
// accumulation modelled in plain C++) and, for floats, the value computed in
// double with the error bound the model must also satisfy.
struct Expect {
  bool exact;     // integers: bits alone decide
  uint64_t bits;  // the expected raw bits
  double value;   // floats: the double reference and its tolerance
  double tol;
};
// premul_scalar_bits is rank's PreMulSum scalar for a launch of type dt
// (raw bits of dt): each rank scales by its own, as NCCL allows.
uint64_t premul_scalar_bits(int dt, int rank);
// reference computes the reduction of in[0..n) (raw bits, rank order); for
// PreMulSum, rank r's input is first scaled by premul_scalar_bits(dt, r).
Expect reference(int dt, int op, int n, const uint64_t* in);
// matches reports whether raw output bits satisfy e.
bool matches(int dt, const Expect& e, uint64_t got);
// round16 rounds v to f16 or bf16 bits (dt), to nearest even.
uint64_t round16(int dt, double v);
// round8 rounds v to f8e4m3 or f8e5m2 bits (dt): nearest even, saturating.
uint64_t round8(int dt, double v);
// selftest checks prims_emu.h's 16-bit float conversions and common.cuh's 8-bit ones against
// round16, round8 and decode_float.
bool selftest();
// describe formats an element's raw bits for a failure message.
std::string describe(int dt, uint64_t bits);
