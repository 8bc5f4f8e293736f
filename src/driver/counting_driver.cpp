#include "tessera/driver_decorators.hpp"

namespace tessera {

void CountingDriver::after_call(DriverCall call, bool succeeded, std::chrono::nanoseconds took) {
  const auto index = static_cast<std::size_t>(call);
  tally_.calls[index] += 1;
  if (!succeeded) tally_.failures[index] += 1;
  tally_.nanoseconds[index] += static_cast<std::uint64_t>(took.count());
}

}  // namespace tessera
