// emu_selftest.cc: checks the emulator's own 16-bit float conversions
// (prims_emu.h, the twins of the PTX cvt instructions) against the
// reference's independent ones: every f16 and bf16 value widened, and f32
// values rounded, including every halfway case near each 16-bit value;
// and stamp.cu's goccl_stamp (a launch of its own, compiled here).
#include <stdio.h>
#include <sys/mman.h>

#include "emu.h"
#include "stamp.cu"

namespace {

int fails = 0;

void fail(const char* what, uint32_t in, uint32_t got, uint32_t want) {
  if (fails++ < 10) printf("FAIL selftest: %s of 0x%08x: got 0x%04x, want 0x%04x\n", what, in, got, want);
}

// check_round compares the emulator's f32 -> 16-bit rounding with the
// reference's (round16, which rounds with nearbyint).
void check_round(uint32_t fbits) {
  float f;
  memcpy(&f, &fbits, 4);
  if (std::isnan(f)) {
    const uint16_t h = goccl::f32_to_f16(f), b = goccl::f32_to_bf16(f);
    if (!std::isnan(decode_float(kF16, h))) fail("f32_to_f16 (NaN)", fbits, h, 0x7e00);
    if (!std::isnan(decode_float(kBF16, b))) fail("f32_to_bf16 (NaN)", fbits, b, 0x7fc0);
    return;
  }
  const uint64_t wantH = round16(kF16, f), wantB = round16(kBF16, f);
  const uint16_t h = goccl::f32_to_f16(f), b = goccl::f32_to_bf16(f);
  if (h != wantH) fail("f32_to_f16", fbits, h, (uint32_t)wantH);
  if (b != wantB) fail("f32_to_bf16", fbits, b, (uint32_t)wantB);
}

// check_round8 compares common.cuh's f32 -> 8-bit rounding with round8.
void check_round8(uint32_t fbits) {
  float f;
  memcpy(&f, &fbits, 4);
  const uint32_t a = goccl::Elem<goccl::f8e4m3>::store(f), b = goccl::Elem<goccl::f8e5m2>::store(f);
  if (std::isnan(f)) {
    if ((a & 0x7f) != 0x7f) fail("f32_to_f8e4m3 (NaN)", fbits, a, 0x7f);
    if ((b & 0x7f) <= 0x7c) fail("f32_to_f8e5m2 (NaN)", fbits, b, 0x7f);
    return;
  }
  const uint64_t wantA = round8(kF8E4M3, f), wantB = round8(kF8E5M2, f);
  if (a != wantA) fail("f32_to_f8e4m3", fbits, a, (uint32_t)wantA);
  if (b != wantB) fail("f32_to_f8e5m2", fbits, b, (uint32_t)wantB);
}

}  // namespace

// stamp_selftest launches goccl_stamp as the copy-engine paths do: the
// start claims the Stamp (number 0) and leaves the end alone, the end
// stores the time and then the number, a slot of 0 stores nothing.
static int stamp_selftest() {
  int bad = 0;
  goccl::Stamp* st = (goccl::Stamp*)emu_map_shared(emu_page_size());
  if (st == nullptr) return 1;
  auto launch = [&](goccl::StampArgs a, const char* label) {
    if (emu_launch_body([a] { goccl_stamp(a); }, 2, 32, 10, label) != kExitOK) {
      printf("FAIL selftest: %s: the launch failed\n", label);
      bad++;
    }
  };
  *st = goccl::Stamp{77, 2, 77, 0};
  const uint64_t t0 = goccl::globaltimer();
  launch({(uint64_t)st, goccl::kStampStart, 0, 5}, "stamp start");
  const uint64_t t1 = goccl::globaltimer();
  if (st->seq != 0 || st->start < t0 || st->start > t1 || st->end != 2) {
    printf("FAIL selftest: stamp start: seq %llu start %+lld ns end %llu, want 0, within %llu ns, 2\n", (unsigned long long)st->seq,
           (long long)(st->start - t0), (unsigned long long)st->end, (unsigned long long)(t1 - t0));
    bad++;
  }
  const uint64_t start = st->start;
  launch({(uint64_t)st, goccl::kStampEnd, 0, 5}, "stamp end");
  const uint64_t t2 = goccl::globaltimer();
  if (st->seq != 5 || st->start != start || st->end < t1 || st->end > t2) {
    printf("FAIL selftest: stamp end: seq %llu, start moved by %lld ns, end %+lld ns, want 5, 0, within %llu ns\n",
           (unsigned long long)st->seq, (long long)(st->start - start), (long long)(st->end - t1), (unsigned long long)(t2 - t1));
    bad++;
  }
  const goccl::Stamp before = *st;
  launch({0, goccl::kStampEnd, 0, 9}, "stamp nothing");
  if (memcmp(&before, st, sizeof before) != 0) {
    printf("FAIL selftest: a stamp of slot 0 changed a Stamp\n");
    bad++;
  }
  munmap(st, emu_page_size());
  return bad;
}

bool selftest() {
  fails = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    const double want = decode_float(kF16, h);
    const float got = goccl::f16_to_f32((uint16_t)h);
    if (!(got == want || (std::isnan(got) && std::isnan(want))) || std::signbit(got) != std::signbit(want))
      fail("f16_to_f32", h, 0, 0);
    // around each 16-bit value: itself, the halfway points to its neighbours, and one f32 ulp either side
    for (int dt : {kF16, kBF16}) {
      const double v = decode_float(dt, h);
      if (!std::isfinite(v)) continue;
      const double next = decode_float(dt, h + 1 < 65536 ? h + 1 : h);
      const double mid = std::isfinite(next) ? (v + next) / 2 : v;
      for (double x : {v, mid}) {
        float f = (float)x;
        uint32_t u;
        memcpy(&u, &f, 4);
        check_round(u);
        check_round(u + 1);
        check_round(u - 1);
      }
    }
  }
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) check_round((uint32_t)u);  // a spread of all f32
  for (uint32_t u : {0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x33000000u,
                     0x33000001u, 0x00000001u, 0x80000001u, 0x38800000u, 0x387fffffu})
    check_round(u);
  // The 8-bit floats: every code widened; every code, the halfway points
  // to its neighbour and one f32 ulp either side rounded; a spread of f32.
  for (uint32_t c = 0; c < 256; c++) {
    const float ga = goccl::Elem<goccl::f8e4m3>::load((goccl::u8)c), gb = goccl::Elem<goccl::f8e5m2>::load((goccl::u8)c);
    const double wa = decode_float(kF8E4M3, c), wb = decode_float(kF8E5M2, c);
    if (!(ga == wa || (std::isnan(ga) && std::isnan(wa))) || std::signbit(ga) != std::signbit(wa)) fail("f8e4m3_to_f32", c, 0, 0);
    if (!(gb == wb || (std::isnan(gb) && std::isnan(wb))) || std::signbit(gb) != std::signbit(wb)) fail("f8e5m2_to_f32", c, 0, 0);
    for (int dt : {kF8E4M3, kF8E5M2}) {
      const double v = decode_float(dt, c);
      if (!std::isfinite(v) || (c & 0x7f) == 0x7f) continue;
      const double next = decode_float(dt, c + 1);
      for (double x : {v, std::isfinite(next) ? (v + next) / 2 : 2 * v}) {
        float f = (float)x;
        uint32_t u;
        memcpy(&u, &f, 4);
        check_round8(u);
        check_round8(u + 1);
        check_round8(u - 1);
      }
    }
  }
  for (uint64_t u = 0; u < (1ull << 32); u += 65537) check_round8((uint32_t)u);
  for (uint32_t u : {0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x43e00000u, 0x43e80000u, 0x47600000u, 0x47700000u, 0u, 0x80000000u})
    check_round8(u);
  const int stampBad = stamp_selftest();
  printf("%s selftest: 16- and 8-bit float conversions (%d wrong), goccl_stamp (%d wrong)\n", fails || stampBad ? "FAIL" : "PASS",
         fails, stampBad);
  return fails == 0 && stampBad == 0;
}
