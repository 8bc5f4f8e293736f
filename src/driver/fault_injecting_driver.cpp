#include <fmt/format.h>

#include "tessera/driver_decorators.hpp"

namespace tessera {

void FaultInjectingDriver::fail(DriverCall call, std::uint64_t nth, Repeat repeat, Errc code) {
  faults_[index(call)] = Fault{.armed = true, .nth = nth == 0 ? 1 : nth, .seen = 0, .repeat = repeat, .code = code,
                               .injected = faults_[index(call)].injected};
}

void FaultInjectingDriver::clear(DriverCall call) { faults_[index(call)].armed = false; }

void FaultInjectingDriver::clear_all() {
  for (Fault& fault : faults_) fault.armed = false;
}

std::optional<Error> FaultInjectingDriver::before_call(DriverCall call) {
  Fault& fault = faults_[index(call)];
  if (!fault.armed) return std::nullopt;
  fault.seen += 1;
  const bool hit = fault.repeat == Repeat::once ? fault.seen == fault.nth : fault.seen >= fault.nth;
  if (!hit) return std::nullopt;
  if (fault.repeat == Repeat::once) fault.armed = false;
  fault.injected += 1;
  return make_error(fault.code, fmt::format("{} driver: injected failure of {} (call {} since armed)", name(),
                                            to_string(call), fault.seen));
}

}  // namespace tessera
