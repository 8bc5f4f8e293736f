// The names and messages of errors (include/tessera/result.hpp).
#include <fmt/format.h>

#include "tessera/result.hpp"

namespace tessera {

std::string_view to_string(Errc code) noexcept {
  switch (code) {
    case Errc::out_of_memory: return "out_of_memory";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::not_found: return "not_found";
    case Errc::not_mapped: return "not_mapped";
    case Errc::already_mapped: return "already_mapped";
    case Errc::still_mapped: return "still_mapped";
    case Errc::map_limit: return "map_limit";
    case Errc::unavailable: return "unavailable";
    case Errc::unsupported: return "unsupported";
    case Errc::platform: return "platform";
  }
  return "unknown";
}

std::string describe(const Error& error) {
  if (error.platform_code == 0) return fmt::format("{}: {}", to_string(error.code), error.message);
  return fmt::format("{}: {} (platform code {})", to_string(error.code), error.message, error.platform_code);
}

}  // namespace tessera
