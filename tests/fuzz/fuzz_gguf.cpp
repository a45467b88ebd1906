// libFuzzer target for the GGUF reader and the tokenizer built from its metadata: any input must
// parse or be refused with UsageError; anything else (a crash, a sanitizer report, an uncaught
// exception, a huge allocation) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "probes/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const infercast::GgufFile file = infercast::GgufFile::parse(std::span(data, size));
    std::uint64_t sum = 0;
    for (const auto& t : file.tensors()) {
      // Touch the first and last byte of every tensor: the reader promised they are in bounds.
      if (t.bytes > 0) sum += t.data[0] + t.data[t.bytes - 1];
    }
    if (const auto tok = infercast::Tokenizer::from(file)) {
      for (int id : tok->encode("hello world \xC3\xA9", true)) sum += tok->decode(id).size();
    }
    return sum == 1 ? 0 : 0;  // keep the reads alive
  } catch (const infercast::UsageError&) {
    return 0;
  }
}
