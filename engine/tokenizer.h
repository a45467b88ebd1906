#pragma once
// The SentencePiece (llama) tokenizer GGUF files carry as tokenizer.ggml.*: text becomes pieces
// by repeatedly merging the adjacent pair whose joined piece scores highest in the vocabulary;
// characters with no piece fall back to byte tokens <0xXX>.
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/gguf.h"

namespace infercast {

class Tokenizer {
 public:
  // nullopt when the file has no llama-style vocabulary; UsageError when it has a broken one.
  static std::optional<Tokenizer> from(const GgufFile& file);

  [[nodiscard]] std::vector<int> encode(std::string_view text, bool add_bos) const;
  [[nodiscard]] std::string decode(int token) const;
  [[nodiscard]] int bos() const { return bos_; }
  [[nodiscard]] int eos() const { return eos_; }
  [[nodiscard]] std::size_t size() const { return pieces_.size(); }

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int> types_;
  std::unordered_map<std::string, int> index_;
  int byte_tokens_[256] = {};
  int bos_ = 1;
  int eos_ = 2;
  int unknown_ = 0;
};

}  // namespace infercast
