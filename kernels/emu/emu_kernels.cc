// emu_kernels.cc: the table of kernel entry points, declared with the same
// instantiation lists the .cu files use, so a kernel the .cu files do not
// define fails to link.
#include "emu.h"

#define EMU_DECL(pfx, opname, tname, T) extern "C" void pfx##tname##_##opname(goccl::Params);
#define EMU_DECL_ALL(pfx)                 \
  GOCCL_TYPES(EMU_DECL, pfx, sum)         \
  GOCCL_TYPES(EMU_DECL, pfx, prod)        \
  GOCCL_TYPES(EMU_DECL, pfx, min)         \
  GOCCL_TYPES(EMU_DECL, pfx, max)         \
  GOCCL_TYPES(EMU_DECL, pfx, avg)         \
  GOCCL_TYPES(EMU_DECL, pfx, premulsum)
#define EMU_DECL_CE(pfx)                  \
  GOCCL_TYPES(EMU_DECL, pfx, sum)         \
  GOCCL_TYPES(EMU_DECL, pfx, prod)        \
  GOCCL_TYPES(EMU_DECL, pfx, min)         \
  GOCCL_TYPES(EMU_DECL, pfx, max)         \
  GOCCL_TYPES(EMU_DECL, pfx, avg)
#define EMU_PTR(pfx, opname, tname, T) &pfx##tname##_##opname,
#define EMU_TABLE(pfx)                                                                  \
  {                                                                                     \
    {GOCCL_TYPES(EMU_PTR, pfx, sum)}, {GOCCL_TYPES(EMU_PTR, pfx, prod)},                \
        {GOCCL_TYPES(EMU_PTR, pfx, min)}, {GOCCL_TYPES(EMU_PTR, pfx, max)},             \
        {GOCCL_TYPES(EMU_PTR, pfx, avg)}, {GOCCL_TYPES(EMU_PTR, pfx, premulsum)}        \
  }
#define EMU_TABLE_CE(pfx)                                                               \
  {                                                                                     \
    {GOCCL_TYPES(EMU_PTR, pfx, sum)}, {GOCCL_TYPES(EMU_PTR, pfx, prod)},                \
        {GOCCL_TYPES(EMU_PTR, pfx, min)}, {GOCCL_TYPES(EMU_PTR, pfx, max)},             \
        {GOCCL_TYPES(EMU_PTR, pfx, avg)}                                                \
  }

EMU_DECL_ALL(goccl_allreduce_oneshot_)
EMU_DECL_ALL(goccl_allreduce_twoshot_)
EMU_DECL_ALL(goccl_allreduce_ll_)
EMU_DECL_ALL(goccl_reduce_oneshot_)
EMU_DECL_ALL(goccl_reducescatter_oneshot_)
EMU_DECL_CE(goccl_cereduce_)
extern "C" void goccl_broadcast_oneshot(goccl::Params);
extern "C" void goccl_allgather_oneshot(goccl::Params);

namespace {
// In Family order: kAR1, kAR2, kARL, kRED, kRS1.
const KernelFn kReduceTables[kRS1 + 1][kNumOps][kNumDts] = {
    EMU_TABLE(goccl_allreduce_oneshot_), EMU_TABLE(goccl_allreduce_twoshot_),
    EMU_TABLE(goccl_allreduce_ll_),      EMU_TABLE(goccl_reduce_oneshot_),
    EMU_TABLE(goccl_reducescatter_oneshot_),
};
const KernelFn kCETable[kNumCEOps][kNumDts] = EMU_TABLE_CE(goccl_cereduce_);
}  // namespace

KernelFn ce_kernel_for(int dt, int op) { return kCETable[op][dt]; }

KernelFn kernel_for(int family, int dt, int op) {
  switch (family) {
    case kBC1:
      return goccl_broadcast_oneshot;
    case kAG1:
      return goccl_allgather_oneshot;
    default:
      return kReduceTables[family][op][dt];
  }
}
