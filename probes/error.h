#pragma once
// One error type for bad input the user can correct (options, files, limits). Front ends turn it
// into a one-line message and exit status 2; anything else escaping is a bug.
#include <stdexcept>
#include <string>

namespace infercast {

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace infercast
