// emu_check.cc: inputs and the independent reference for the emulator's
// checks. Integers are computed exactly in 64-bit arithmetic, wrapped to the
// element's width. Floats must match, bit for bit, a model of the kernels'
// arithmetic (accumulation in float or double in rank order, one final
// rounding done here with nearbyint, not with the emulator's conversions),
// so that every rank's result is identical and a one-ulp error shows; the
// model is itself checked against a double-precision reduction within a
// tolerance covering that accumulation and rounding.
#include <stdio.h>

#include "emu.h"

const char* const kFamilyName[kNumFamilies] = {"allreduce_oneshot",     "allreduce_twoshot", "allreduce_ll",
                                               "reduce_oneshot",        "reducescatter_oneshot",
                                               "broadcast_oneshot",     "allgather_oneshot"};
const char* const kDtName[kNumDts] = {"i8",  "u8",  "i32", "u32", "i64",    "u64",
                                      "f16", "bf16", "f32", "f64", "f8e4m3", "f8e5m2"};
const int kDtSize[kNumDts] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1};
const char* const kOpName[kNumOps] = {"sum", "prod", "min", "max", "avg", "premulsum"};

namespace {

bool is_float(int dt) { return dt >= kF16; }
bool is_signed(int dt) { return dt == kI8 || dt == kI32 || dt == kI64; }
uint64_t width_mask(int dt) { return kDtSize[dt] == 8 ? ~0ull : (1ull << (8 * kDtSize[dt])) - 1; }

int64_t sign_extend(int dt, uint64_t v) {
  const int bits = 8 * kDtSize[dt];
  if (bits == 64) return (int64_t)v;
  const uint64_t m = 1ull << (bits - 1);
  v &= width_mask(dt);
  return (int64_t)((v ^ m) - m);
}

}  // namespace

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t gen_elem(int dt, int op, uint64_t seed, int rank, uint64_t idx) {
  const uint64_t h = mix64(seed ^ mix64(((uint64_t)rank << 40) ^ idx));
  const uint64_t h2 = mix64(h);
  if (!is_float(dt)) {
    uint64_t v = h & width_mask(dt);
    return v ? v : 1;  // no zeros
  }
  // sign, a small exponent (products stay in range), random mantissa.
  const uint64_t sign = h & 1;
  const int e = op == kProd ? -1 + (int)((h >> 1) & 1) : -2 + (int)((h >> 1) % 5);
  switch (dt) {
    case kF16:
      return sign << 15 | (uint64_t)(15 + e) << 10 | (h2 & 0x3ff);
    case kBF16:
      return sign << 15 | (uint64_t)(127 + e) << 7 | (h2 & 0x7f);
    case kF32:
      return sign << 31 | (uint64_t)(127 + e) << 23 | (h2 & 0x7fffff);
    case kF8E4M3:
      return sign << 7 | (uint64_t)(7 + e) << 3 | (h2 & 7);
    case kF8E5M2:
      return sign << 7 | (uint64_t)(15 + e) << 2 | (h2 & 3);
    default:
      return sign << 63 | (uint64_t)(1023 + e) << 52 | (h2 & ((1ull << 52) - 1));
  }
}

uint8_t gen_byte(uint64_t seed, int rank, uint64_t idx) {
  return (uint8_t)(1 + mix64(seed ^ mix64(((uint64_t)rank << 40) ^ idx ^ 0x5555)) % 255);
}

double decode_float(int dt, uint64_t b) {
  switch (dt) {
    case kF16: {
      const int e = (int)(b >> 10) & 31, m = (int)(b & 0x3ff);
      double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
      return (b >> 15) & 1 ? -v : v;
    }
    case kBF16: {
      const int e = (int)(b >> 7) & 255, m = (int)(b & 0x7f);
      double v = e == 0 ? std::ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : std::ldexp(128 + m, e - 134);
      return (b >> 15) & 1 ? -v : v;
    }
    case kF32: {
      float f;
      uint32_t u = (uint32_t)b;
      memcpy(&f, &u, 4);
      return f;
    }
    case kF8E4M3: {  // no infinity; 0x7f is NaN
      const int e = (int)(b >> 3) & 15, m = (int)(b & 7);
      double v = (b & 0x7f) == 0x7f ? NAN : e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
      return (b >> 7) & 1 ? -v : v;
    }
    case kF8E5M2: {
      const int e = (int)(b >> 2) & 31, m = (int)(b & 3);
      double v = e == 0 ? std::ldexp(m, -16) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(4 + m, e - 17);
      return (b >> 7) & 1 ? -v : v;
    }
    default: {
      double d;
      memcpy(&d, &b, 8);
      return d;
    }
  }
}

namespace {

// encode16 rounds v to a 16-bit float with mbits mantissa bits and the given
// exponent bias, to nearest even, by scaling to the unit in the last place
// and rounding with nearbyint (the default rounding mode).
uint64_t encode16(double v, int mbits, int bias) {
  const uint64_t sign = std::signbit(v) ? 1ull << 15 : 0;
  const double mag = std::fabs(v);
  const int emin = 1 - bias, emax = bias;
  if (std::isnan(v)) return sign | (uint64_t)((1 << (15 - mbits)) - 1) << mbits | 1;
  if (mag == 0) return sign;
  int e;
  std::frexp(mag, &e);  // mag = f * 2^e, f in [0.5, 1)
  const int E = e - 1 > emin ? e - 1 : emin;
  const double r = std::ldexp(std::nearbyint(std::ldexp(mag, mbits - E)), E - mbits);
  const double maxv = std::ldexp(2.0 - std::ldexp(1.0, -mbits), emax);
  if (r > maxv) return sign | (uint64_t)((1 << (15 - mbits)) - 1) << mbits;  // infinity
  if (r < std::ldexp(1.0, emin)) return sign | (uint64_t)std::ldexp(r, mbits - emin);  // subnormal
  std::frexp(r, &e);
  const uint64_t m = (uint64_t)std::ldexp(r, mbits - (e - 1)) - (1ull << mbits);
  return sign | (uint64_t)(e - 1 + bias) << mbits | m;
}

// encode8 rounds v to an 8-bit float (mbits mantissa bits, the given bias,
// maxv its largest finite value), to nearest even with nearbyint,
// saturating beyond maxv (infinity too) as the GPU's satfinite conversion.
uint64_t encode8(double v, int mbits, int bias, double maxv) {
  const uint64_t sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return sign | 0x7f;
  const double mag = std::fabs(v);
  int e;
  std::frexp(mag, &e);
  const int emin = 1 - bias;
  const int E = e - 1 > emin ? e - 1 : emin;
  const double r = mag == 0 ? 0 : std::ldexp(std::nearbyint(std::ldexp(mag, mbits - E)), E - mbits);
  const double rr = r > maxv ? maxv : r;
  if (rr < std::ldexp(1.0, emin)) return sign | (uint64_t)std::ldexp(rr, mbits - emin);  // subnormal, zero
  std::frexp(rr, &e);
  const uint64_t m = (uint64_t)std::ldexp(rr, mbits - (e - 1)) - (1ull << mbits);
  return sign | (uint64_t)(e - 1 + bias) << mbits | m;
}

uint64_t encode_float(int dt, double v) {
  switch (dt) {
    case kF16:
      return encode16(v, 10, 15);
    case kBF16:
      return encode16(v, 7, 127);
    case kF8E4M3:
      return encode8(v, 3, 7, 448);
    case kF8E5M2:
      return encode8(v, 2, 15, 57344);
    case kF32: {
      float f = (float)v;
      uint32_t u;
      memcpy(&u, &f, 4);
      return u;
    }
    default: {
      uint64_t u;
      memcpy(&u, &v, 8);
      return u;
    }
  }
}

// model computes what the kernels must produce bit for bit: the inputs
// reduced in rank order in the accumulation type A (float for the 16-bit
// types), the average divided once, then one rounding to the element type.
template <typename A>
uint64_t model(int dt, int op, int n, const double* v) {
  A acc = (A)v[0];
  for (int r = 1; r < n; r++) {
    const A x = (A)v[r];
    switch (op) {
      case kSum:
      case kAvg:
      case kPreMulSum:
        acc = acc + x;
        break;
      case kProd:
        acc = acc * x;
        break;
      case kMin:
        acc = x < acc ? x : acc;
        break;
      case kMax:
        acc = acc < x ? x : acc;
        break;
    }
  }
  if (op == kAvg) acc = acc / (A)n;
  return encode_float(dt, (double)acc);
}

}  // namespace

uint64_t premul_scalar_bits(int dt, int rank) {
  static const double kFloat[goccl::kMaxRanks] = {0.5, 1.5, -2.0, 0.75, 3.0, -0.25, 1.25, 2.5};  // exact in every float type
  static const int64_t kInt[goccl::kMaxRanks] = {3, -2, 5, 7, -1, 2, 9, -3};
  if (!is_float(dt)) return (uint64_t)kInt[rank] & width_mask(dt);
  return encode_float(dt, kFloat[rank]);
}

uint64_t round8(int dt, double v) { return encode_float(dt, v); }

uint64_t round16(int dt, double v) { return dt == kF16 ? encode16(v, 10, 15) : encode16(v, 7, 127); }

Expect reference(int dt, int op, int n, const uint64_t* in) {
  Expect e{};
  // PreMulSum: each rank's product, rounded to the type as it is pushed,
  // then a Sum of those; the double reference keeps the exact products.
  uint64_t scaled[goccl::kMaxRanks];
  double exact[goccl::kMaxRanks];
  if (op == kPreMulSum) {
    for (int r = 0; r < n; r++) {
      const uint64_t s = premul_scalar_bits(dt, r);
      if (!is_float(dt)) {
        scaled[r] = in[r] * s;
        continue;
      }
      exact[r] = decode_float(dt, in[r]) * decode_float(dt, s);
      // The product in the accumulation type (float32 below f64), then
      // the type's rounding.
      scaled[r] = encode_float(dt, dt == kF64 ? exact[r] : (double)(float)exact[r]);
    }
    in = scaled;
  }
  if (!is_float(dt)) {
    e.exact = true;
    const uint64_t m = width_mask(dt);
    uint64_t acc = in[0] & m;
    for (int r = 1; r < n; r++) {
      const uint64_t x = in[r] & m;
      switch (op) {
        case kSum:
        case kAvg:
        case kPreMulSum:
          acc = (acc + x) & m;
          break;
        case kProd:
          acc = (acc * x) & m;
          break;
        case kMin:
          if (is_signed(dt) ? sign_extend(dt, x) < sign_extend(dt, acc) : x < acc) acc = x;
          break;
        case kMax:
          if (is_signed(dt) ? sign_extend(dt, x) > sign_extend(dt, acc) : x > acc) acc = x;
          break;
      }
    }
    if (op == kAvg) acc = is_signed(dt) ? (uint64_t)(sign_extend(dt, acc) / n) & m : acc / (uint64_t)n;
    e.bits = acc;
    return e;
  }
  double v[goccl::kMaxRanks];
  double sum = 0, sumabs = 0, prod = 1;
  for (int r = 0; r < n; r++) {
    v[r] = decode_float(dt, in[r]);
    if (op == kPreMulSum) v[r] = exact[r];  // the model rounds, the reference does not
    sum += v[r];
    sumabs += std::fabs(v[r]);
    prod *= v[r];
  }
  e.exact = false;
  if (op == kPreMulSum)  // the model sums the rounded products
    for (int r = 0; r < n; r++) v[r] = decode_float(dt, in[r]);
  e.bits = dt == kF64 ? model<double>(dt, op, n, v) : model<float>(dt, op, n, v);
  if (op == kMin || op == kMax) {  // the winner is one of the inputs
    e.value = decode_float(dt, e.bits);
    return e;
  }
  // acc: float accumulation error per step; out: the final rounding.
  const double acc = dt == kF64 ? std::ldexp(1.0, -52) : std::ldexp(1.0, -23);
  const double out = dt == kF16      ? std::ldexp(1.0, -10)
                     : dt == kBF16   ? std::ldexp(1.0, -7)
                     : dt == kF8E4M3 ? std::ldexp(1.0, -3)
                     : dt == kF8E5M2 ? std::ldexp(1.0, -2)
                                     : 0;
  const double floor = dt == kF16      ? std::ldexp(1.0, -24)
                       : dt == kF8E4M3 ? std::ldexp(1.0, -9)
                       : dt == kF8E5M2 ? std::ldexp(1.0, -16)
                                       : 0;
  switch (op) {
    case kSum:
      e.value = sum;
      e.tol = acc * n * sumabs + out * std::fabs(sum) + floor;
      break;
    case kPreMulSum:  // and each product's rounding (float, then the type)
      e.value = sum;
      e.tol = (acc * (n + 1) + out) * sumabs + out * std::fabs(sum) + floor * (n + 1);
      break;
    case kAvg:
      e.value = sum / n;
      e.tol = (acc * n * sumabs + out * std::fabs(sum)) / n + acc * std::fabs(sum / n) + floor;
      break;
    default:  // prod
      e.value = prod;
      e.tol = (acc * (n + 1) + out) * std::fabs(prod) + floor;
      break;
  }
  return e;
}

bool matches(int dt, const Expect& e, uint64_t got) {
  got &= width_mask(dt);
  if (got != (e.bits & width_mask(dt))) return false;
  if (!is_float(dt)) return true;
  // The model itself must agree with the double reference.
  const double g = decode_float(dt, got);
  return std::isfinite(g) && std::fabs(g - e.value) <= e.tol;
}

std::string describe(int dt, uint64_t bits) {
  char b[96];
  bits &= width_mask(dt);
  if (is_float(dt))
    snprintf(b, sizeof b, "%.9g (0x%llx)", decode_float(dt, bits), (unsigned long long)bits);
  else if (is_signed(dt))
    snprintf(b, sizeof b, "%lld (0x%llx)", (long long)sign_extend(dt, bits), (unsigned long long)bits);
  else
    snprintf(b, sizeof b, "%llu (0x%llx)", (unsigned long long)bits, (unsigned long long)bits);
  return b;
}
