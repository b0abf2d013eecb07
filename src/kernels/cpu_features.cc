// The one CPUID probe of the library, and QKV_ISA.
#include "kernels/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "qkv/error.h"

namespace qkv::kernels {
namespace {

// Linux's arch_prctl request and the XSAVE feature number of the tile data.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureTileData = 18;

bool cpu_has_amx() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
  if (!(amx_bf16 && amx_tile && amx_int8)) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  uint32_t xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  // XTILECFG (17) and XTILEDATA (18) enabled by the OS.
  return (xcr0_lo & (3u << 17)) == (3u << 17);
}

CpuFeatures probe() {
  __builtin_cpu_init();
  CpuFeatures f;
  unsigned a, b, c, d;  // F16C: CPUID.1:ECX bit 29 (every AVX2 CPU has it; the kernels use it)
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  f.amx = f.avx512_bf16 && cpu_has_amx() &&
          syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureTileData) == 0;
  return f;
}

constexpr const char* kIsaNames[kIsaCount] = {"portable",    "avx2",        "avx512",
                                              "avx512_vnni", "avx512_bf16", "amx"};

std::string supported_names() {
  std::string names;
  for (Isa isa : supported_isas()) names += std::string(names.empty() ? "" : ", ") + isa_name(isa);
  return names;
}

Isa check_supported(Isa isa, const char* where) {
  if (!cpu_has(isa))
    throw Error(ErrorKind::kValue, std::string(where) + isa_name(isa) +
                                       " is not supported by this CPU; supported: " +
                                       supported_names() + " (unset QKV_ISA to pick the fastest)");
  return isa;
}

Isa environment_ceiling() {
  const char* wanted = std::getenv("QKV_ISA");
  if (wanted == nullptr || *wanted == '\0') return supported_isas().front();
  for (int level = 0; level < kIsaCount; ++level)
    if (wanted == std::string(kIsaNames[level]))
      return check_supported(static_cast<Isa>(level), "QKV_ISA=");
  std::string known;
  for (const char* name : kIsaNames) known += std::string(known.empty() ? "" : ", ") + name;
  throw Error(ErrorKind::kValue, std::string("QKV_ISA=") + wanted +
                                     " is not an instruction set qkv knows (" + known +
                                     "); supported by this CPU: " + supported_names());
}

std::atomic<int> g_ceiling_override{-1};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = probe();
  return features;
}

const char* isa_name(Isa isa) { return kIsaNames[static_cast<int>(isa)]; }

bool cpu_has(Isa isa) {
  const CpuFeatures& f = cpu_features();
  const bool has[kIsaCount] = {true, f.avx2_fma, f.avx512, f.avx512_vnni, f.avx512_bf16, f.amx};
  return has[static_cast<int>(isa)];
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (int level = kIsaCount - 1; level >= 0; --level)
    if (cpu_has(static_cast<Isa>(level))) isas.push_back(static_cast<Isa>(level));
  return isas;
}

Isa isa_ceiling() {
  const int forced = g_ceiling_override.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<Isa>(forced);
  static const Isa ceiling = environment_ceiling();
  return ceiling;
}

void override_isa_ceiling(Isa isa) {
  g_ceiling_override.store(static_cast<int>(check_supported(isa, "override_isa_ceiling: ")),
                           std::memory_order_relaxed);
}

void reset_isa_ceiling() { g_ceiling_override.store(-1, std::memory_order_relaxed); }

}  // namespace qkv::kernels
