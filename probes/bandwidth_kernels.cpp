#include "probes/bandwidth_kernels.h"

#include <array>

namespace infercast {

namespace {
constexpr std::array<StreamContract, 5> kContracts{{
    {StreamKernel::read, "read", 1, 4, 0, "none"},
    {StreamKernel::write, "write", 1, 0, 4, "temporal"},
    {StreamKernel::write_nt, "write_nt", 1, 0, 4, "non-temporal"},
    {StreamKernel::copy, "copy", 2, 4, 4, "temporal"},
    {StreamKernel::triad, "triad", 3, 8, 4, "temporal"},
}};
}  // namespace

const StreamContract& contract(StreamKernel kernel) {
  return kContracts[static_cast<std::size_t>(kernel)];
}

std::span<const StreamContract> all_stream_contracts() { return kContracts; }

const StreamKernels& stream_kernels_for(IsaLevel level) {
  switch (level) {
    case IsaLevel::amx:
    case IsaLevel::avx512: return stream_kernels_avx512();
    case IsaLevel::avx2: return stream_kernels_avx2();
    case IsaLevel::scalar: break;
  }
  return stream_kernels_scalar();
}

}  // namespace infercast
