// Writing a report, and the byte sizes every report prints.
#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "tessera/report.hpp"

namespace tessera {

std::string format_bytes(Bytes bytes) {
  static constexpr std::array<std::string_view, 5> units{"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < KiB) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  while (value >= 1023.995 && unit + 1 < units.size()) {  // what would print as 1024.00 goes up a unit
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, units[unit]);
}

Result<void> write_report_file(const std::filesystem::path& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    const int err = errno;
    return make_error(Errc::invalid_argument, fmt::format("{}: cannot create: {}", path.string(), std::strerror(err)),
                      err);
  }
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) {
    const int err = errno;
    return make_error(Errc::platform, fmt::format("{}: cannot write: {}", path.string(), std::strerror(err)), err);
  }
  return {};
}

}  // namespace tessera
