#include <algorithm>

#include <fmt/format.h>

#include "tessera/driver_decorators.hpp"

namespace tessera {

CapacityLimitDriver::CapacityLimitDriver(std::unique_ptr<Driver> inner, Bytes limit)
    : ForwardingDriver(std::move(inner)), limit_(limit) {}

Bytes CapacityLimitDriver::capacity() const noexcept { return std::min(limit_, ForwardingDriver::capacity()); }

Result<ChunkId> CapacityLimitDriver::create_chunk(Bytes size) {
  const Bytes held = census().page_bytes;
  const Bytes limit = capacity();
  if (size > limit || held > limit - size) {
    return make_error(Errc::out_of_memory,
                      fmt::format("{} driver: cannot create a page of {} bytes: {} of the {} bytes allowed by the "
                                  "capacity limit are in use",
                                  name(), size, held, limit));
  }
  return ForwardingDriver::create_chunk(size);
}

}  // namespace tessera
