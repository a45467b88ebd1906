#include "cli/model_commands.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <memory>

#include "cli/progress.h"
#include "engine/generate.h"
#include "engine/run.h"
#include "kernels/formats.h"
#include "probes/atomic_file.h"
#include "probes/error.h"
#include "probes/stats.h"
#include "probes/topology.h"
#include "probes/units.h"

namespace infercast::cli {
namespace {

struct GenArgs {
  std::string preset;
  ModelShape shape;
  int layers = 0;
  std::string quant = "Q4_0";
  std::uint64_t seed = 1;
  std::string out;
  unsigned threads = 0;
};

void gen_model(GenArgs& a) {
  GenerateOptions o;
  if (!a.preset.empty()) {
    const ModelPreset* p = find_preset(a.preset);
    if (p == nullptr) throw UsageError(fmt::format("unknown preset '{}' (presets: {})", a.preset, preset_names()));
    o.shape = p->shape;
    o.name = fmt::format("synthetic {}", p->name);
    // Explicit dimensions override the preset's; --layers is the usual one, to fit memory.
    if (a.layers > 0) o.shape.layers = a.layers;
  } else {
    o.shape = a.shape;
    o.shape.layers = a.layers;
    if (o.shape.kv_heads == 0) o.shape.kv_heads = o.shape.heads;
  }
  o.quant = a.quant;
  o.seed = a.seed;
  o.threads = a.threads > 0 ? a.threads : host_topology().cores;
  validate(o);
  check_writable(a.out);
  ProgressPrinter progress;
  const GenerateResult r = generate_model(o, a.out, [&](double f) { progress.update("writing tensors", f); });
  progress.finish();
  fmt::print("wrote {}: {} parameters, {} of tensors, {} ({} layers, dim {}, ffn {}, {} heads / {} KV{})\n", a.out,
             format_count(static_cast<double>(r.parameters)), format_size(r.file_bytes), a.quant, o.shape.layers, o.shape.dim,
             o.shape.ffn, o.shape.heads, o.shape.kv_heads,
             o.shape.experts > 0 ? fmt::format(", {} experts / {} active", o.shape.experts, o.shape.active_experts) : "");
}

struct RunArgs {
  std::string model;
  unsigned threads = 0;
  int prompt_tokens = 128;
  int gen_tokens = 32;
  int concurrency = 1;
  std::string prompt;
  std::string kv_type = "f16";
  std::string isa;
  std::uint64_t seed = 1;
  bool json = false;
  bool mlock = false;
  bool check_read = false;
  std::string load = "auto";
  int repetitions = 1;
  bool products = false;
};

nlohmann::json to_json(const ProductTime& p) {
  return {{"kind", to_string(p.role)}, {"formats", p.formats},  {"calls", p.calls},
          {"bytes", p.bytes},          {"rows", p.rows},        {"seconds", p.seconds},
          {"weight_gbs", p.seconds > 0 ? static_cast<double>(p.bytes) / p.seconds / 1e9 : 0.0}};
}

nlohmann::json to_json(const RunReport& r) {
  nlohmann::json products = nlohmann::json::array();
  for (const ProductTime& p : r.decode_products) products.push_back(to_json(p));
  return {{"prompt_tokens", r.prompt_tokens},   {"gen_tokens", r.gen_tokens},
          {"concurrency", r.concurrency},       {"threads", r.threads},
          {"isa", r.isa},                       {"prefill_kernel", r.prefill_kernel},
          {"decode_kernel", r.decode_kernel},   {"prefill_tps", r.prefill_tps},
          {"prefill_gops", r.prefill_gops},     {"decode_tps", r.decode_tps},
          {"decode_tps_per_seq", r.decode_tps_per_seq}, {"ttft_ms", r.ttft_ms},
          {"weight_bytes", r.weight_bytes},     {"decode_bytes_per_step", r.decode_bytes_per_step},
          {"decode_weight_gbs", r.decode_weight_gbs}, {"kv_cache_bytes", r.kv_cache_bytes},
          {"prefill_seconds", r.prefill_seconds}, {"decode_seconds", r.decode_seconds},
          {"prefill_gemm_seconds", r.prefill_gemm_seconds}, {"decode_gemm_seconds", r.decode_gemm_seconds},
          {"prefill_attention_seconds", r.prefill_attention_seconds}, {"decode_attention_seconds", r.decode_attention_seconds},
          {"prefill_token_seconds", r.prefill_token_seconds}, {"decode_token_seconds", r.decode_token_seconds},
          {"decode_products", products},
          {"peak_rss_bytes", r.peak_rss_bytes}, {"tokens", r.tokens},
          {"numa", {{"nodes", r.numa.nodes}, {"applied", r.numa.applied}, {"bytes_bound", r.numa.bytes_bound},
                    {"note", r.numa.note}}},
          {"text", r.text}};
}

void add_read_check(const RunReport& r, nlohmann::json& j) {
  if (r.dram_read_before_gbs <= 0) return;
  j["dram_read_before_gbs"] = r.dram_read_before_gbs;
  j["dram_read_after_gbs"] = r.dram_read_after_gbs;
  j["decode_read_fraction"] = r.decode_read_fraction;
}

// Each measured run's headline figures and their spread: what the medians stand on.
nlohmann::json samples_json(const RunSeries& s) {
  return {{"repetitions", s.decode_tps.size()},
          {"warmed_up", s.warmed_up},
          {"samples", {{"prefill_tps", s.prefill_tps}, {"decode_tps", s.decode_tps}, {"ttft_ms", s.ttft_ms}}},
          {"prefill_tps_cv", summarize_rates(s.prefill_tps).cv},
          {"decode_tps_cv", summarize_rates(s.decode_tps).cv}};
}

// "60.1-89.2 tokens/s (cv 14%)": a rate's range over the runs.
std::string spread(const std::vector<double>& values) {
  const Summary s = summarize_rates(values);
  return fmt::format("{:.1f}-{:.1f} tokens/s (cv {:.0f}%)", s.worst, s.best, 100 * s.cv);
}

// "88.7% / 5.0% / 5.0% / 1.3%": where a phase's time went, so a slow run says which part to look at.
std::string time_split(double total, double products, double attention, double token_work) {
  if (total <= 0) return "-";
  const auto percent = [total](double part) { return 100 * part / total; };
  return fmt::format("{:.1f}% / {:.1f}% / {:.1f}% / {:.1f}%", percent(products), percent(attention), percent(token_work),
                     percent(std::max(0.0, total - products - attention - token_work)));
}

// Decode's products by kind: where the matrix time of a step goes, each at its own bandwidth.
void print_products(const RunReport& r) {
  const int steps = r.gen_tokens - 1;
  if (steps < 1 || r.decode_products.empty()) return;
  fmt::print("\n  decode products per step, all layers   (median of the runs)\n");
  fmt::print("    {:<14} {:<16} {:>6} {:>10} {:>9} {:>6} {:>8}\n", "kind", "formats", "calls", "weights", "ms", "share", "GB/s");
  for (const ProductTime& p : r.decode_products) {
    fmt::print("    {:<14} {:<16} {:>6} {:>10} {:>9.3f} {:>5.1f}% {:>8.1f}\n", to_string(p.role), p.formats, p.calls / steps,
               format_size(p.bytes / static_cast<std::uint64_t>(steps)), 1e3 * p.seconds / steps,
               r.decode_gemm_seconds > 0 ? 100 * p.seconds / r.decode_gemm_seconds : 0.0,
               p.seconds > 0 ? static_cast<double>(p.bytes) / p.seconds / 1e9 : 0.0);
  }
}

void run(RunArgs& a) {
  RunOptions o;
  o.threads = a.threads > 0 ? a.threads : host_topology().cores;
  o.prompt_tokens = a.prompt_tokens;
  o.gen_tokens = a.gen_tokens;
  o.concurrency = a.concurrency;
  o.seed = a.seed;
  o.check_read = a.check_read;
  if (!a.prompt.empty()) o.prompt = a.prompt;
  if (a.kv_type == "f16" || a.kv_type == "F16") {
    o.kv_type = GgmlType::f16;
  } else if (a.kv_type == "f32" || a.kv_type == "F32") {
    o.kv_type = GgmlType::f32;
  } else {
    throw UsageError(fmt::format("--kv-type '{}' is not f16 or f32", a.kv_type));
  }
  if (!a.isa.empty()) {
    o.isa = parse_isa_level(a.isa);
    if (!o.isa) throw UsageError(fmt::format("--isa '{}' is not scalar, avx2, avx512 or amx", a.isa));
  }
  std::optional<WeightLoading> loading;
  if (a.load == "map") {
    loading = WeightLoading::map;
  } else if (a.load == "copy") {
    loading = WeightLoading::copy;
  } else if (a.load != "auto") {
    throw UsageError(fmt::format("--load '{}' is not auto, map or copy", a.load));
  }
  const Model model = Model::load(a.model, loading);
  if (a.mlock && !model.file().lock_in_memory()) {
    fmt::print(stderr, "infercast: warning: could not lock the weights in memory ({}); running unlocked\n", std::strerror(errno));
  }
  const std::optional<Tokenizer> tokenizer = Tokenizer::from(model.file());
  const RunSeries series = run_series(model, o, tokenizer ? &*tokenizer : nullptr, a.repetitions);
  const RunReport& r = series.report;
  if (a.json) {
    // Generated bytes need not form UTF-8; replace what does not.
    nlohmann::json j = to_json(r);
    j.update(samples_json(series));
    add_read_check(r, j);
    j["weight_loading"] = model.file().loading() == WeightLoading::copy ? "copy" : "map";
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  const ModelConfig& c = model.config();
  fmt::print("model {}: {} layers, dim {}, {} heads / {} KV{}, {} of weights, {} parameters\n", a.model, c.layers,
             c.dim, c.heads, c.kv_heads, c.is_moe() ? fmt::format(", {} experts / {} active", c.experts, c.active_experts) : "",
             format_size(r.weight_bytes), format_count(static_cast<double>(model.parameters())));
  fmt::print("weights {}; NUMA ({} node{}): {}\n", model.file().loading() == WeightLoading::copy ? "copied into huge pages" : "memory-mapped",
             r.numa.nodes, r.numa.nodes == 1 ? "" : "s", r.numa.note);
  fmt::print("threads {}, ISA {} (prefill {}, decode {}), KV cache {} ({})\n\n", r.threads, r.isa, r.prefill_kernel,
             r.decode_kernel, format_size(r.kv_cache_bytes), a.kv_type);
  fmt::print("  prefill   {:5d} tokens x {:3d}   {:9.1f} tokens/s   {:8.1f} GOPS   TTFT {:.1f} ms\n", r.prompt_tokens,
             r.concurrency, r.prefill_tps, r.prefill_gops, r.ttft_ms);
  fmt::print("  decode    {:5d} tokens x {:3d}   {:9.2f} tokens/s   ({:.2f} per sequence)   weights {:.1f} GB/s, {} per step\n",
             r.gen_tokens, r.concurrency, r.decode_tps, r.decode_tps_per_seq, r.decode_weight_gbs,
             format_size(r.decode_bytes_per_step));
  fmt::print("  time      prefill {}   decode {}   (products / attention / per-token work / the rest)\n",
             time_split(r.prefill_seconds, r.prefill_gemm_seconds, r.prefill_attention_seconds, r.prefill_token_seconds),
             time_split(r.decode_seconds, r.decode_gemm_seconds, r.decode_attention_seconds, r.decode_token_seconds));
  if (r.dram_read_before_gbs > 0) {
    fmt::print("  DRAM read {:.1f} GB/s before, {:.1f} after: decode weights at {:.2f}x their mean\n", r.dram_read_before_gbs,
               r.dram_read_after_gbs, r.decode_read_fraction);
  }
  if (series.decode_tps.size() > 1) {
    fmt::print("  runs      {} after a warm-up, each figure above their median: prefill {}, decode {}\n",
               series.decode_tps.size(), spread(series.prefill_tps), spread(series.decode_tps));
  }
  fmt::print("  peak RSS  {}\n", format_size(r.peak_rss_bytes));
  if (a.products) print_products(r);
  if (!r.text.empty()) {
    fmt::print("\nsequence 0 continues: {}\n", r.text.front());
  }
}

}  // namespace

void add_gen_model_command(CLI::App& app, int& exit_status) {
  auto a = std::make_shared<GenArgs>();
  CLI::App* cmd = app.add_subcommand("gen-model", "Write a synthetic llama-family GGUF model with deterministic random weights");
  cmd->add_option("--preset", a->preset, "Model shape: " + preset_names());
  cmd->add_option("--layers", a->layers, "Transformer blocks (with --preset: scale the preset down)");
  cmd->add_option("--dim", a->shape.dim, "Hidden size");
  cmd->add_option("--ffn", a->shape.ffn, "Feed-forward size (per expert)");
  cmd->add_option("--heads", a->shape.heads, "Attention heads");
  cmd->add_option("--kv-heads", a->shape.kv_heads, "Key/value heads (default: --heads)");
  cmd->add_option("--vocab", a->shape.vocab, "Vocabulary size");
  cmd->add_option("--experts", a->shape.experts, "Experts per MoE layer (0: dense)");
  cmd->add_option("--active-experts", a->shape.active_experts, "Experts each token uses");
  cmd->add_option("--arch", a->shape.architecture, "Architecture for explicit dimensions: llama or qwen2")->capture_default_str();
  cmd->add_option("--quant", a->quant, "Weight format (" + weight_format_names() + ") or recipe (Q4_K_M, Q5_K_M)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the random weights")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Threads to quantize with (default: all cores)");
  cmd->add_option("--out", a->out, "Output GGUF file")->required();
  cmd->callback([a, &exit_status] {
    if (a->preset.empty() && (a->layers == 0 || a->shape.dim == 0 || a->shape.ffn == 0 || a->shape.heads == 0 || a->shape.vocab == 0)) {
      throw UsageError("gen-model needs --preset NAME or all of --layers --dim --ffn --heads --vocab");
    }
    gen_model(*a);
    exit_status = 0;
  });
}

void add_run_command(CLI::App& app, int& exit_status) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Run a GGUF model: prefill and batched decode, measured");
  cmd->add_option("--model", a->model, "GGUF model file")->required();
  cmd->add_option("--threads", a->threads, "Threads (default: all physical cores)");
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Synthetic prompt length")->capture_default_str();
  cmd->add_option("--gen-tokens", a->gen_tokens, "Tokens to generate per sequence")->capture_default_str();
  cmd->add_option("--concurrency", a->concurrency, "Sequences decoded together")->capture_default_str();
  cmd->add_option("--prompt", a->prompt, "Prompt text (needs the model's SentencePiece vocabulary)");
  cmd->add_option("--kv-type", a->kv_type, "KV cache precision: f16 or f32")->capture_default_str();
  cmd->add_option("--isa", a->isa, "Force an ISA level: scalar, avx2, avx512, amx");
  cmd->add_option("--seed", a->seed, "Seed of the synthetic prompts (each sequence draws its own)")->capture_default_str();
  cmd->add_flag("--mlock", a->mlock, "Lock the weights in memory");
  cmd->add_flag("--check-read", a->check_read,
                "Measure the DRAM read just before and after the run; report decode as a fraction of it");
  cmd->add_option("--load", a->load,
                  "auto (copy when the file fits in memory), map (mmap the file), copy (read it into huge pages)")
      ->capture_default_str();
  cmd->add_option("--repetitions", a->repetitions,
                  "Measured runs (after one warm-up run when more than one); every figure is their median")
      ->capture_default_str();
  cmd->add_flag("--products", a->products, "Also print decode's weight products by kind: time and bandwidth of each");
  cmd->add_flag("--json", a->json, "Print the results as JSON");
  cmd->callback([a, &exit_status] {
    run(*a);
    exit_status = 0;
  });
}

}  // namespace infercast::cli
