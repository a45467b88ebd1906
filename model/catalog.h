#pragma once
// The model and hardware catalogs, one JSON document per entry, compiled into the binary from
// model/catalog/ (see model/CMakeLists.txt).
#include <span>
#include <string_view>

namespace infercast {

struct CatalogEntry {
  std::string_view name;  // the file's stem, e.g. "llama-3.1-8b"
  std::string_view json;
};

std::span<const CatalogEntry> model_catalog();
std::span<const CatalogEntry> hardware_catalog();
// A calibrated probe profile of a measured machine (model/catalog/reference.json): described
// machines learn their kernel efficiencies from it when no local calibration exists. Empty when
// the build has none.
std::string_view reference_profile();

}  // namespace infercast
