// File descriptors between processes on one machine: over a Unix socket with SCM_RIGHTS (any kernel, any
// two processes that share a socket), or taken from another process with pidfd_getfd (Linux 5.6+, with
// ptrace-attach permission over it). How an exported chunk's descriptor reaches its importer (docs/allocator.md,
// "Sharing a block with another process").
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tessera/result.hpp"

namespace tessera {

// The most descriptors one message carries (the kernel's SCM_MAX_FD).
inline constexpr std::size_t descriptors_per_message_max = 253;

// Sends `bytes` (at least one) with `descriptors` attached, in one message on a connected Unix socket. The
// descriptors stay the caller's: the receiver gets duplicates.
Result<void> send_descriptors(int socket, std::span<const std::byte> bytes, std::span<const int> descriptors);

struct ReceivedDescriptors {
  std::vector<std::byte> bytes;
  std::vector<int> descriptors;  // the receiver's own now, close-on-exec; it closes them
};

// Receives one message sent by send_descriptors: at most `bytes_max` bytes and `descriptors_max`
// descriptors. A message cut short (more bytes or descriptors than allowed) is an Errc::invalid_argument error,
// and every descriptor that came with it is closed.
Result<ReceivedDescriptors> receive_descriptors(int socket, std::size_t bytes_max, std::size_t descriptors_max);

// A duplicate of descriptor `descriptor` of process `pid` (pidfd_open + pidfd_getfd). Errc::unsupported
// where the kernel lacks the calls, Errc::unavailable where this process may not take it (ptrace permission);
// callers fall back to a socket.
Result<int> take_descriptor(pid_t pid, int descriptor);

}  // namespace tessera
