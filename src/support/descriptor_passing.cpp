#include "support/descriptor_passing.hpp"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace tessera {

namespace {

Error socket_error(std::string_view call, int error_number) {
  return make_error(Errc::platform, fmt::format("descriptor passing: {} failed: {}", call, std::strerror(error_number)),
                    error_number);
}

void close_all(const std::vector<int>& descriptors) {
  for (int descriptor : descriptors) close(descriptor);
}

}  // namespace

Result<void> send_descriptors(int socket, std::span<const std::byte> bytes, std::span<const int> descriptors) {
  if (bytes.empty()) return make_error(Errc::invalid_argument, "descriptor passing: a message needs at least one byte");
  if (descriptors.size() > descriptors_per_message_max) {
    return make_error(Errc::invalid_argument,
                      fmt::format("descriptor passing: {} descriptors in one message; at most {}", descriptors.size(),
                                  descriptors_per_message_max));
  }
  iovec data{.iov_base = const_cast<std::byte*>(bytes.data()), .iov_len = bytes.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * descriptors.size()));
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  if (!descriptors.empty()) {
    message.msg_control = control.data();
    message.msg_controllen = control.size();
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * descriptors.size());
    std::memcpy(CMSG_DATA(header), descriptors.data(), sizeof(int) * descriptors.size());
  }
  ssize_t sent = 0;
  do {
    sent = sendmsg(socket, &message, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return socket_error("sendmsg", errno);
  if (static_cast<std::size_t>(sent) != bytes.size()) {
    return make_error(Errc::platform, fmt::format("descriptor passing: sendmsg sent {} of {} bytes", sent, bytes.size()));
  }
  return {};
}

Result<ReceivedDescriptors> receive_descriptors(int socket, std::size_t bytes_max, std::size_t descriptors_max) {
  descriptors_max = std::min(descriptors_max, descriptors_per_message_max);
  ReceivedDescriptors received;
  received.bytes.resize(std::max<std::size_t>(bytes_max, 1));
  iovec data{.iov_base = received.bytes.data(), .iov_len = received.bytes.size()};
  // Room for the most a sender may attach, so that extra descriptors are seen (and closed), not left open.
  std::vector<char> control(CMSG_SPACE(sizeof(int) * descriptors_per_message_max));
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  ssize_t got = 0;
  do {
    got = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return socket_error("recvmsg", errno);
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const std::size_t first = received.descriptors.size();
    received.descriptors.resize(first + count);
    std::memcpy(received.descriptors.data() + first, CMSG_DATA(header), count * sizeof(int));
  }
  if (got == 0) {
    close_all(received.descriptors);
    return make_error(Errc::invalid_argument, "descriptor passing: the peer closed the socket before sending");
  }
  if ((message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || received.descriptors.size() > descriptors_max) {
    close_all(received.descriptors);
    return make_error(Errc::invalid_argument,
                      fmt::format("descriptor passing: a message larger than expected (at most {} bytes and {} "
                                  "descriptors; got {} descriptors{})",
                                  bytes_max, descriptors_max, received.descriptors.size(),
                                  (message.msg_flags & MSG_TRUNC) != 0 ? ", bytes cut off" : ""));
  }
  received.bytes.resize(static_cast<std::size_t>(got));
  return received;
}

Result<int> take_descriptor(pid_t pid, int descriptor) {
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  const long process = syscall(SYS_pidfd_open, pid, 0);
  if (process < 0) {
    const int error_number = errno;
    return make_error(error_number == ENOSYS ? Errc::unsupported : Errc::unavailable,
                      fmt::format("descriptor passing: pidfd_open({}) failed: {}", pid, std::strerror(error_number)),
                      error_number);
  }
  const long taken = syscall(SYS_pidfd_getfd, static_cast<int>(process), descriptor, 0);
  const int error_number = errno;
  close(static_cast<int>(process));
  if (taken < 0) {
    return make_error(error_number == ENOSYS ? Errc::unsupported : Errc::unavailable,
                      fmt::format("descriptor passing: pidfd_getfd(process {}, descriptor {}) failed: {}{}", pid,
                                  descriptor, std::strerror(error_number),
                                  error_number == EPERM ? " (it needs ptrace permission over that process; pass the "
                                                          "descriptor over a Unix socket instead)"
                                                        : ""),
                      error_number);
  }
  return static_cast<int>(taken);
#else
  (void)pid;
  (void)descriptor;
  return make_error(Errc::unsupported, "descriptor passing: this build has no pidfd_getfd");
#endif
}

}  // namespace tessera
