#include "probes/units.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <ctime>
#include <fmt/format.h>

namespace infercast {

std::optional<std::uint64_t> parse_size(std::string_view text) {
  double number = 0;
  const auto* begin = text.data();
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, number);
  if (ec != std::errc{} || ptr == begin || number < 0) return std::nullopt;
  std::string suffix;
  for (const char* p = ptr; p != end; ++p) {
    suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  }
  std::uint64_t scale = 1;
  if (suffix.empty() || suffix == "b") {
    scale = 1;
  } else if (suffix == "k" || suffix == "kib" || suffix == "kb") {
    scale = 1ULL << 10;
  } else if (suffix == "m" || suffix == "mib" || suffix == "mb") {
    scale = 1ULL << 20;
  } else if (suffix == "g" || suffix == "gib" || suffix == "gb") {
    scale = 1ULL << 30;
  } else if (suffix == "t" || suffix == "tib" || suffix == "tb") {
    scale = 1ULL << 40;
  } else {
    return std::nullopt;
  }
  const double bytes = number * static_cast<double>(scale);
  if (bytes > 1.8e19) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

std::string format_size(std::uint64_t bytes) {
  const auto b = static_cast<double>(bytes);
  if (bytes >= (1ULL << 30)) return fmt::format("{:.1f} GiB", b / (1ULL << 30));
  if (bytes >= (1ULL << 20)) return fmt::format("{:.1f} MiB", b / (1ULL << 20));
  if (bytes >= (1ULL << 10)) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string format_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.1f} M", n / 1e6);
  return fmt::format("{:.1f} K", n / 1e3);
}

std::string utc_timestamp() {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string tidy_cpu_name(std::string_view brand) {
  std::string name;
  for (const char c : brand) {
    if (c != ' ' || (!name.empty() && name.back() != ' ')) name += c;
  }
  if (!name.empty() && name.back() == ' ') name.pop_back();
  return name;
}

}  // namespace infercast
