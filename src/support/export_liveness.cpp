#include "support/export_liveness.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace tessera {

ExportLiveness::ExportLiveness(ExportLiveness&& other) noexcept
    : held_(std::exchange(other.held_, -1)), peer_(std::exchange(other.peer_, -1)) {}

ExportLiveness& ExportLiveness::operator=(ExportLiveness&& other) noexcept {
  if (this != &other) {
    close_both();
    held_ = std::exchange(other.held_, -1);
    peer_ = std::exchange(other.peer_, -1);
  }
  return *this;
}

ExportLiveness::~ExportLiveness() { close_both(); }

void ExportLiveness::close_both() noexcept {
  if (held_ >= 0) ::close(held_);
  if (peer_ >= 0) ::close(peer_);
  held_ = peer_ = -1;
}

Result<int> ExportLiveness::hand_out() {
  if (held_ < 0) {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) {
      const int error_number = errno;
      return make_error(Errc::platform, fmt::format("export liveness: pipe2 failed: {}", std::strerror(error_number)),
                        error_number);
    }
    peer_ = ends[0];
    held_ = ends[1];
  }
  const int descriptor = ::fcntl(peer_, F_DUPFD_CLOEXEC, 0);
  if (descriptor < 0) {
    const int error_number = errno;
    return make_error(Errc::platform, fmt::format("export liveness: dup failed: {}", std::strerror(error_number)),
                      error_number);
  }
  return descriptor;
}

Result<bool> exporter_gone(int descriptor) {
  auto not_liveness = [descriptor](std::string_view what) -> Error {
    return make_error(Errc::invalid_argument,
                      fmt::format("descriptor {} is no exporter's liveness descriptor ({})", descriptor, what));
  };
  struct stat status {};
  if (::fstat(descriptor, &status) != 0) return not_liveness(std::strerror(errno));
  if (!S_ISFIFO(status.st_mode)) return not_liveness("not a pipe");
  const int flags = ::fcntl(descriptor, F_GETFL);
  if (flags < 0) return not_liveness(std::strerror(errno));
  if ((flags & O_ACCMODE) != O_RDONLY) return not_liveness("not the read end of a pipe");
  pollfd watched{.fd = descriptor, .events = POLLIN, .revents = 0};
  int ready = 0;
  do {
    ready = ::poll(&watched, 1, 0);
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) {
    const int error_number = errno;
    return make_error(Errc::platform, fmt::format("export liveness: poll failed: {}", std::strerror(error_number)),
                      error_number);
  }
  // The write end is closed: the exporter exited or its allocator went.
  return ready > 0 && (watched.revents & POLLHUP) != 0;
}

}  // namespace tessera
