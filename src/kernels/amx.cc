#include "kernels/amx.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

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
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & (1u << 5))) return false;  // AVX512_BF16
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;          // OSXSAVE
  uint32_t xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  // XTILECFG (17) and XTILEDATA (18) enabled by the OS.
  return (xcr0_lo & (3u << 17)) == (3u << 17);
}

}  // namespace

bool amx_usable() {
  static const bool usable =
      cpu_has_amx() && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureTileData) == 0;
  return usable;
}

}  // namespace qkv::kernels
