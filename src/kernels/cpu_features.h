// What this CPU can run, probed once per process, and the instruction-set
// level (QKV_ISA) that caps every kernel family: the float32 attention and
// row kernels (KernelTable), the bfloat16 and int8 linear kernels
// (LowPrecisionKernels) and the GGUF block kernels (QuantKernels).
//
// The levels are ordered; each family lists its tables fastest first with the
// level each needs, and runs the first one the CPU has at or below the cap.
// QKV_ISA=portable|avx2|avx512|avx512_vnni|avx512_bf16|amx sets the cap (unset:
// no cap); a name that is not a level, or one this CPU lacks, is an error.
//
// AMX (Advanced Matrix Extensions: Intel Sapphire Rapids and later): eight
// tile registers of up to 16 rows × 64 bytes, and a unit that multiplies
// them (TDPBF16PS: bfloat16 pairs into float32; TDPBUSD: u8 × s8 quads into
// int32). Linux hands out the 8 KiB of tile state only to a process that asks
// for it (arch_prctl ARCH_REQ_XCOMP_PERM); without that a tile instruction
// raises SIGILL, so the probe asks, and reports AMX only when granted.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

namespace qkv::kernels {

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2, FMA and F16C
  bool avx512 = false;       // AVX512 F, BW, VL and DQ
  bool avx512_vnni = false;  // vpdpbusd (with avx512)
  bool avx512_bf16 = false;  // vdpbf16ps (with avx512)
  bool amx = false;          // AMX-TILE, -BF16, -INT8, OS tile state, granted to this process
};
// Probed on the first call.
const CpuFeatures& cpu_features();

// Instruction-set levels, lowest first.
enum class Isa { kPortable, kAvx2, kAvx512, kAvx512Vnni, kAvx512Bf16, kAmx };
constexpr int kIsaCount = 6;

const char* isa_name(Isa isa);
// Whether this CPU has the features of `isa`.
bool cpu_has(Isa isa);
// The levels this CPU has, highest first (the last is kPortable).
std::vector<Isa> supported_isas();
// The cap: override_isa_ceiling's, else QKV_ISA's (read and checked on the
// first call; throws qkv::Error for an unknown or unsupported name), else the
// highest level.
Isa isa_ceiling();
// Tests: cap every family at `isa` from now on (throws if this CPU lacks
// it); reset_isa_ceiling() goes back to QKV_ISA's cap.
void override_isa_ceiling(Isa isa);
void reset_isa_ceiling();

// A family's table and the level it needs.
template <class Table>
struct IsaTable {
  Isa isa;
  const Table* table;
};

// The tables of `all` (fastest first) this CPU runs at or below `ceiling`.
template <class Table, std::size_t N>
std::vector<const Table*> tables_within(const std::array<IsaTable<Table>, N>& all, Isa ceiling) {
  std::vector<const Table*> tables;
  for (const IsaTable<Table>& t : all)
    if (t.isa <= ceiling && cpu_has(t.isa)) tables.push_back(t.table);
  return tables;
}

// For each level, the first table of `all` within it that `accept`s: what
// the family runs under that cap (a portable table accepts, so none is null).
template <class Table, std::size_t N, class Accept>
std::array<const Table*, kIsaCount> first_within_each_level(
    const std::array<IsaTable<Table>, N>& all, Accept accept) {
  std::array<const Table*, kIsaCount> first{};
  for (int level = 0; level < kIsaCount; ++level)
    for (const Table* t : tables_within(all, static_cast<Isa>(level)))
      if (accept(*t)) {
        first[level] = t;
        break;
      }
  return first;
}

}  // namespace qkv::kernels
