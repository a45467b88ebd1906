#include "engine/tokenizer.h"

#include <fmt/format.h>

#include <queue>

#include "probes/error.h"

namespace infercast {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581
constexpr int kByteType = 6;

std::size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;  // a stray continuation byte stands alone
}

// The byte of a "<0xAB>" piece, or -1.
int byte_of(const std::string& p) {
  if (p.size() != 6 || !p.starts_with("<0x") || p.back() != '>') return -1;
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(p[3]);
  const int lo = hex(p[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

std::optional<Tokenizer> Tokenizer::from(const GgufFile& file) {
  const GgufValue* model = file.find("tokenizer.ggml.model");
  const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
  if (model == nullptr || tokens == nullptr || model->type != GgufType::string || model->text != "llama") return std::nullopt;
  if (tokens->type != GgufType::array || tokens->element_type != GgufType::string || tokens->items.empty()) {
    throw UsageError("tokenizer.ggml.tokens must be a non-empty array of strings");
  }
  Tokenizer t;
  const std::size_t n = tokens->items.size();
  const GgufValue* scores = file.find("tokenizer.ggml.scores");
  const GgufValue* types = file.find("tokenizer.ggml.token_type");
  if (scores != nullptr && (scores->type != GgufType::array || scores->items.size() != n || scores->element_type != GgufType::f32)) {
    throw UsageError("tokenizer.ggml.scores must hold one f32 per token");
  }
  if (types != nullptr && (types->type != GgufType::array || types->items.size() != n || types->element_type != GgufType::i32)) {
    throw UsageError("tokenizer.ggml.token_type must hold one i32 per token");
  }
  for (auto& b : t.byte_tokens_) b = -1;
  for (std::size_t i = 0; i < n; ++i) {
    t.pieces_.push_back(tokens->items[i].text);
    t.scores_.push_back(scores != nullptr ? static_cast<float>(scores->items[i].real) : 0.0F);
    t.types_.push_back(types != nullptr ? static_cast<int>(types->items[i].sint) : 1);
    t.index_.emplace(t.pieces_.back(), static_cast<int>(i));
    const std::string& p = t.pieces_.back();
    if (const int byte = byte_of(p); t.types_.back() == kByteType && byte >= 0) t.byte_tokens_[byte] = static_cast<int>(i);
  }
  const auto id = [&](const char* key, int fallback) {
    const std::uint64_t v = file.get_uint_or(key, static_cast<std::uint64_t>(fallback));
    if (v >= n) throw UsageError(fmt::format("{} = {} is outside the vocabulary", key, v));
    return static_cast<int>(v);
  };
  t.bos_ = id("tokenizer.ggml.bos_token_id", 1);
  t.eos_ = id("tokenizer.ggml.eos_token_id", 2);
  t.unknown_ = id("tokenizer.ggml.unknown_token_id", 0);
  return t;
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int> out;
  if (add_bos) out.push_back(bos_);
  if (text.empty()) return out;
  // SentencePiece marks word boundaries with U+2581 and starts the text with one.
  std::string s(kSpace);
  for (char c : text) {
    if (c == ' ') {
      s += kSpace;
    } else {
      s += c;
    }
  }
  // Symbols: UTF-8 characters in a linked list; merge the best-scoring adjacent pair until no
  // pair joins into a known piece.
  struct Symbol {
    std::size_t begin, length;
    int prev, next;
  };
  std::vector<Symbol> sym;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = std::min(utf8_length(static_cast<unsigned char>(s[i])), s.size() - i);
    sym.push_back({i, len, static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1});
    i += len;
  }
  sym.back().next = -1;
  struct Candidate {
    float score;
    int left;
    std::size_t length;  // the joined length when queued: stale entries no longer match
    bool operator<(const Candidate& o) const { return score < o.score || (score == o.score && left > o.left); }
  };
  std::priority_queue<Candidate> queue;
  const auto consider = [&](int left) {
    if (left < 0 || sym[static_cast<std::size_t>(left)].next < 0) return;
    const Symbol& a = sym[static_cast<std::size_t>(left)];
    const Symbol& b = sym[static_cast<std::size_t>(a.next)];
    const auto it = index_.find(s.substr(a.begin, a.length + b.length));
    if (it != index_.end()) queue.push({scores_[static_cast<std::size_t>(it->second)], left, a.length + b.length});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& a = sym[static_cast<std::size_t>(c.left)];
    if (a.length == 0 || a.next < 0 || a.length + sym[static_cast<std::size_t>(a.next)].length != c.length) continue;
    Symbol& b = sym[static_cast<std::size_t>(a.next)];
    a.length += b.length;
    b.length = 0;
    a.next = b.next;
    if (a.next >= 0) sym[static_cast<std::size_t>(a.next)].prev = c.left;
    consider(a.prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0 && i < static_cast<int>(sym.size()); i = sym[static_cast<std::size_t>(i)].next) {
    const Symbol& x = sym[static_cast<std::size_t>(i)];
    const std::string piece = s.substr(x.begin, x.length);
    const auto it = index_.find(piece);
    if (it != index_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char byte : piece) out.push_back(byte_tokens_[byte] >= 0 ? byte_tokens_[byte] : unknown_);
  }
  return out;
}

std::string Tokenizer::decode(int token) const {
  if (token < 0 || static_cast<std::size_t>(token) >= pieces_.size()) return {};
  const std::string& p = pieces_[static_cast<std::size_t>(token)];
  const int type = types_[static_cast<std::size_t>(token)];
  if (type == kByteType) {
    const int byte = byte_of(p);
    return byte < 0 ? std::string() : std::string(1, static_cast<char>(byte));
  }
  if (type != 1) return {};  // control and unknown tokens print nothing
  std::string out;
  for (std::size_t i = 0; i < p.size();) {
    if (p.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += p[i++];
    }
  }
  return out;
}

}  // namespace infercast
