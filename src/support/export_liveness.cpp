#include "support/export_liveness.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      const int error_number = errno;
      return make_error(Errc::platform, fmt::format("export liveness: socketpair failed: {}", std::strerror(error_number)),
                        error_number);
    }
    held_ = pair[0];
    peer_ = pair[1];
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
  int domain = 0;
  int type = 0;
  socklen_t length = sizeof domain;
  const bool is_pair_end = ::getsockopt(descriptor, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 &&
                           (length = sizeof type, ::getsockopt(descriptor, SOL_SOCKET, SO_TYPE, &type, &length) == 0) &&
                           domain == AF_UNIX && type == SOCK_STREAM;
  if (!is_pair_end) {
    return make_error(Errc::invalid_argument,
                      fmt::format("descriptor {} is no exporter's liveness descriptor (not a Unix stream socket)",
                                  descriptor));
  }
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
  // Nothing is ever written to the pair: readable means end of file, the held end closed.
  return ready > 0 && (watched.revents & (POLLHUP | POLLIN | POLLRDHUP)) != 0;
}

}  // namespace tessera
