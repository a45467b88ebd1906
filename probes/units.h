#pragma once
// One unit policy: rates in GB/s = 1e9 bytes/s; sizes in binary units (KiB, MiB, GiB).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace infercast {

// "512MiB", "2GiB", "64M", "1g", "4096" -> bytes (suffixes are binary; B optional).
std::optional<std::uint64_t> parse_size(std::string_view text);

// What users type (format names, presets, recipes) matches without regard to ASCII case.
bool iequals(std::string_view a, std::string_view b);

// 4096 -> "4 KiB", 3 << 20 -> "3.0 MiB".
std::string format_size(std::uint64_t bytes);
// Now in UTC as ISO 8601 ("2026-12-01T03:08:10Z"), for the measured_at fields.
std::string utc_timestamp();
// "1.10 B", "596.0 M": parameter and token counts.
std::string format_count(double n);
// A CPUID brand string as a name to print: CPUs pad it with spaces at either end and some
// inside ("Intel(R) Xeon(R) CPU           E5-2680"), which tables and sentences then carry.
std::string tidy_cpu_name(std::string_view brand);

}  // namespace infercast
