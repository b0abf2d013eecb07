// AMX (Advanced Matrix Extensions: Intel Sapphire Rapids and later): eight
// tile registers of up to 16 rows × 64 bytes, and a unit that multiplies
// them (TDPBF16PS: bfloat16 pairs into float32; TDPBUSD: u8 × s8 quads into
// int32). Linux hands out the 8 KiB of tile state only to a process that asks
// for it (arch_prctl ARCH_REQ_XCOMP_PERM); without that a tile instruction
// raises SIGILL.
#pragma once

namespace qkv::kernels {

// Whether this CPU has AMX-TILE, AMX-BF16, AMX-INT8 and AVX512_BF16, the OS
// saves tile state, and this process has been granted it (asked once, on the
// first call).
bool amx_usable();

}  // namespace qkv::kernels
