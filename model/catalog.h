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
// Calibrated probe profiles of measured machines (model/catalog/references/): described machines
// learn their kernel efficiencies from the one whose kernels they would run.
std::span<const CatalogEntry> reference_profiles();

}  // namespace infercast
