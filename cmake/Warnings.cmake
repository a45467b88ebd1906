# Warnings are errors for the project's own code; third-party headers come in as SYSTEM.
add_library(infercast_warnings INTERFACE)
target_compile_options(infercast_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough -Werror
  # GCC 12 reports false -Wrestrict overlaps inside std::string concatenation at -O3 (GCC PR 105329).
  $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
