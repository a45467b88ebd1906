// infercast_peer_gemm: the kernels beside oneDNN's matmul (BF16 and INT8, AMX where the CPU has
// it) and OpenBLAS's sgemm, same shape, same threads, same run, weights cycled through copies
// larger than the last-level cache for every library alike. Used by scripts/compare-peers.
//
//   infercast_peer_gemm [--threads N] [--shape 4096x4096] [--batches 1,8,64] [--footprint-mib 1024]
#include <CLI/CLI.hpp>
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kernels/formats.h"
#include "kernels/gemm.h"
#include "kernels/half.h"
#include "kernels/measure.h"
#include "probes/bandwidth.h"
#include "probes/stats.h"
#include "probes/timer.h"
#include "probes/topology.h"

namespace {

using infercast::GgmlType;

struct Args {
  unsigned threads = infercast::host_topology().cores;
  std::size_t rows = 4096;  // N: output features
  std::size_t cols = 4096;  // K: input features
  std::vector<std::size_t> batches{1, 8, 64};
  std::size_t footprint = infercast::kDramFloorBytes;  // as the kernel sweep's least footprint
};

// Unknown options, a missing value or a bad number are a one-line usage error, status 2; --help
// prints the options.
std::optional<int> parse(int argc, char** argv, Args& a) {
  CLI::App app{"The kernels beside oneDNN's matmul and OpenBLAS's sgemm, same shape, threads and run"};
  std::string shape = "4096x4096";
  std::size_t footprint_mib = a.footprint >> 20;
  app.add_option("--threads", a.threads)->check(CLI::Range(1U, infercast::host_topology().cores));
  app.add_option("--shape", shape, "ROWSxCOLS")->capture_default_str();
  app.add_option("--batches", a.batches)->delimiter(',')->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--footprint-mib", footprint_mib)->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  try {
    app.parse(argc, argv);
    const infercast::Shape s = infercast::parse_shape(shape);
    a.rows = s.rows;
    a.cols = s.cols;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "infercast_peer_gemm: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // parse_shape's UsageError
    fmt::print(stderr, "infercast_peer_gemm: {}\n", e.what());
    return 2;
  }
  a.footprint = footprint_mib << 20;
  return std::nullopt;
}

// Median seconds per product: passes over every copy, the first discarded.
double time_per_call(std::size_t copies, const std::function<void(std::size_t)>& call) {
  for (std::size_t c = 0; c < copies; ++c) call(c);
  std::vector<double> t;
  const double start = infercast::now_seconds();
  while (t.size() < 7 || infercast::now_seconds() - start < 0.5) {
    const double t0 = infercast::now_seconds();
    for (std::size_t c = 0; c < copies; ++c) call(c);
    t.push_back((infercast::now_seconds() - t0) / static_cast<double>(copies));
  }
  return infercast::median_of(t);
}

std::size_t copies_for(std::size_t bytes, std::size_t footprint) { return std::max<std::size_t>(1, (footprint + bytes - 1) / bytes); }

struct Row {
  std::string what;
  std::size_t batch;
  double gops;
};

double ours(const Args& a, GgmlType type, std::size_t batch, std::string& kernel) {
  // A fresh team per measurement: its spinning threads must not share the cores with the peers'.
  infercast::GemmContext ctx(a.threads);
  const auto& f = infercast::format_info(type);
  const std::size_t bytes = f.row_bytes(a.cols) * a.rows;
  const std::size_t copies = copies_for(bytes, a.footprint);
  std::vector<float> src(a.cols);
  for (std::size_t k = 0; k < a.cols; ++k) src[k] = 0.02F * static_cast<float>(static_cast<int>(k * 7919 % 201) - 100) / 100.0F;
  // One row quantized, then copied: the reference K-quant quantizer over 512 MiB would take
  // minutes, and the kernels stream the same bytes whatever the values.
  std::vector<std::uint8_t> row(f.row_bytes(a.cols));
  f.quantize(src.data(), row.data(), a.cols);
  std::vector<std::uint8_t> w(bytes * copies);
  for (std::size_t r = 0; r < a.rows * copies; ++r) std::memcpy(w.data() + r * row.size(), row.data(), row.size());
  // In the layout this level's kernels prefer, as a loaded model holds them; like oneDNN's
  // reorder below, rewritten once, outside the timing.
  std::vector<infercast::WeightView> views;
  for (std::size_t c = 0; c < copies; ++c) {
    std::uint8_t* data = w.data() + c * bytes;
    views.push_back(infercast::relayout(infercast::make_weight_view(type, data, a.rows, a.cols), data, ctx.preferred_layout(type)));
  }
  std::vector<float> x(batch * a.cols, 0.25F);
  std::vector<float> y(batch * a.rows);
  kernel = std::string(ctx.kernel_name(type, batch, a.cols, views.front().layout));
  const double s = time_per_call(copies, [&](std::size_t c) { ctx.gemm(views[c], x.data(), batch, y.data()); });
  return 2.0 * double(a.rows) * double(a.cols) * double(batch) / s / 1e9;
}

// oneDNN's matmul GOPS and, in `impl`, the implementation it chose; throws dnnl::error where it
// has none.
double onednn_gops(const Args& a, dnnl::memory::data_type src_dt, dnnl::memory::data_type dt, std::size_t batch,
                   std::string& impl) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  const auto M = static_cast<memory::dim>(batch);
  const auto K = static_cast<memory::dim>(a.cols);
  const auto N = static_cast<memory::dim>(a.rows);
  const bool int8 = dt == memory::data_type::s8;
  const memory::desc src_md({M, K}, src_dt, memory::format_tag::ab);
  const memory::desc w_any({K, N}, dt, memory::format_tag::any);
  const memory::desc dst_md({M, N}, int8 ? memory::data_type::s32 : memory::data_type::f32, memory::format_tag::ab);
  const matmul::primitive_desc pd(matmul::desc(src_md, w_any, dst_md), eng);
  impl = pd.impl_info_str();
  const matmul prim(pd);
  const std::size_t elem = int8 ? 1 : 2;
  // Weights as the kernels store them: N rows of K, i.e. K x N with tag ba; oneDNN repacks them
  // once into its preferred layout, as any oneDNN user would.
  const memory::desc user_w({K, N}, dt, memory::format_tag::ba);
  const std::size_t bytes = pd.weights_desc().get_size();
  const std::size_t copies = copies_for(bytes, a.footprint);
  std::vector<std::uint8_t> raw(static_cast<std::size_t>(K * N) * elem);
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::uint8_t>(int8 ? (i * 7919 % 61) : 0);
  if (!int8) {
    auto* h = reinterpret_cast<std::uint16_t*>(raw.data());
    for (std::size_t i = 0; i < raw.size() / 2; ++i) h[i] = infercast::fp32_to_bf16(0.01F * static_cast<float>(static_cast<int>(i % 101) - 50));
  }
  memory user(user_w, eng, raw.data());
  std::vector<memory> packed;
  for (std::size_t c = 0; c < copies; ++c) {
    packed.emplace_back(pd.weights_desc(), eng);
    reorder(user, packed.back()).execute(strm, user, packed.back());
  }
  memory src(src_md, eng);
  std::memset(src.get_data_handle(), 1, src_md.get_size());
  memory dst(dst_md, eng);
  strm.wait();
  const double s = time_per_call(copies, [&](std::size_t c) {
    prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed[c]}, {DNNL_ARG_DST, dst}});
    strm.wait();
  });
  return 2.0 * double(a.rows) * double(a.cols) * double(batch) / s / 1e9;
}

// oneDNN's GOPS and the implementation it chose (e.g. "brg:avx512_core_amx"); nullopt where it
// has none for this data type on this CPU (bf16 without AVX-512, say).
struct Peer {
  std::optional<double> gops;
  std::string impl;
};

// `src_dt` for the activations, `dt` for the weights.
Peer onednn(const Args& a, dnnl::memory::data_type src_dt, dnnl::memory::data_type dt, std::size_t batch) {
  Peer p;
  try {
    p.gops = onednn_gops(a, src_dt, dt, batch, p.impl);
  } catch (const dnnl::error& e) {
    p.impl = fmt::format("none ({})", e.what());
  }
  return p;
}

// The faster of oneDNN's two INT8 matmuls: s8 x s8, and u8 x s8 (vpmaddubsw's native form,
// the one its AVX2 code is built for; s8 activations there pay a compensation pass).
Peer onednn_int8(const Args& a, std::size_t batch) {
  using dt = dnnl::memory::data_type;
  Peer s8 = onednn(a, dt::s8, dt::s8, batch);
  Peer u8 = onednn(a, dt::u8, dt::s8, batch);
  s8.impl = "s8s8 " + s8.impl;
  u8.impl = "u8s8 " + u8.impl;
  if (!s8.gops || (u8.gops && *u8.gops > *s8.gops)) return u8;
  return s8;
}

double openblas(const Args& a, std::size_t batch) {
  const std::size_t bytes = a.rows * a.cols * 4;
  const std::size_t copies = copies_for(bytes, a.footprint);
  std::vector<float> w(a.rows * a.cols * copies, 0.01F);
  std::vector<float> x(batch * a.cols, 0.25F);
  std::vector<float> y(batch * a.rows);
  const auto M = static_cast<int>(batch);
  const auto N = static_cast<int>(a.rows);
  const auto K = static_cast<int>(a.cols);
  const double s = time_per_call(copies, [&](std::size_t c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0F, x.data(), K, w.data() + c * a.rows * a.cols, K,
                0.0F, y.data(), N);
  });
  return 2.0 * double(a.rows) * double(a.cols) * double(batch) / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const std::optional<int> status = parse(argc, argv, a)) return *status;
  // Same threads, pinned one per core, for every library.
  setenv("OMP_NUM_THREADS", std::to_string(a.threads).c_str(), 1);
  setenv("OMP_PROC_BIND", "close", 0);
  setenv("OMP_PLACES", "cores", 0);
  setenv("OMP_WAIT_POLICY", "passive", 0);  // idle OpenMP threads sleep instead of spinning
  openblas_set_num_threads(static_cast<int>(a.threads));
  fmt::print("shape {}x{} (rows x cols), {} threads, weights cycled over {} MiB, ISA level {}\n", a.rows, a.cols, a.threads,
             a.footprint >> 20, infercast::to_string(infercast::active_level()));
  fmt::print("{:>5}  {:<28} {:>10}  {:<26} {:>10} {:>7}\n", "batch", "infercast", "GOPS", "peer", "GOPS", "ratio");
  const auto row = [](std::size_t batch, const std::string& what, double g, const std::string& peer, const Peer& p) {
    if (p.gops) {
      fmt::print("{:>5}  {:<28} {:>10.1f}  {:<26} {:>10.1f} {:>7.2f}\n", batch, what, g, peer, *p.gops, g / *p.gops);
    } else {
      fmt::print("{:>5}  {:<28} {:>10.1f}  {:<26} {:>10} {:>7}\n", batch, what, g, peer, "n/a", "n/a");
    }
  };
  std::vector<std::string> impls;
  for (std::size_t batch : a.batches) {
    std::string k;
    const double bf16 = ours(a, GgmlType::bf16, batch, k);
    const Peer dn_bf16 = onednn(a, dnnl::memory::data_type::bf16, dnnl::memory::data_type::bf16, batch);
    row(batch, "BF16 (" + k + ")", bf16, "oneDNN matmul bf16", dn_bf16);
    const Peer dn_s8 = onednn_int8(a, batch);
    for (GgmlType t : {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q5_0, GgmlType::q4_k}) {
      const double g = ours(a, t, batch, k);
      row(batch, std::string(infercast::format_info(t).name) + " (" + k + ")", g, "oneDNN matmul int8", dn_s8);
    }
    impls.push_back(fmt::format("batch {}: bf16 {}; int8 {}", batch, dn_bf16.impl, dn_s8.impl));
    const double f32 = ours(a, GgmlType::f32, batch, k);
    const double ob = openblas(a, batch);
    row(batch, "F32 (" + k + ")", f32, "OpenBLAS sgemm", Peer{ob, "openblas"});
  }
  // Which oneDNN implementation ran: a reference one ("ref:any") would be no fair peer.
  for (const auto& i : impls) fmt::print("oneDNN {}\n", i);
  return 0;
}
