// Names of the driver vocabulary, for messages and reports.
#include <numeric>

#include "tessera/driver.hpp"

namespace tessera {

std::string_view to_string(DriverCall call) noexcept {
  switch (call) {
    case DriverCall::reserve: return "reserve";
    case DriverCall::release_reservation: return "release_reservation";
    // Reports (replay JSON, driver tallies) have always named these two create_page and release_page; the
    // names stay, so that saved reports and the reference figures compare key by key.
    case DriverCall::create_chunk: return "create_page";
    case DriverCall::release_chunk: return "release_page";
    case DriverCall::map: return "map";
    case DriverCall::set_access: return "set_access";
    case DriverCall::unmap: return "unmap";
    case DriverCall::create_event: return "create_event";
    case DriverCall::record_event: return "record_event";
    case DriverCall::query_event: return "query_event";
    case DriverCall::synchronize_event: return "synchronize_event";
    case DriverCall::destroy_event: return "destroy_event";
    case DriverCall::synchronize_stream: return "synchronize_stream";
    case DriverCall::synchronize_device: return "synchronize_device";
    case DriverCall::copy: return "copy";
    case DriverCall::allocate_host: return "allocate_host";
    case DriverCall::free_host: return "free_host";
    case DriverCall::copy_to_host: return "copy_to_host";
    case DriverCall::copy_to_device: return "copy_to_device";
    case DriverCall::export_chunk: return "export_chunk";
    case DriverCall::import_chunk: return "import_chunk";
  }
  return "unknown";
}

std::uint64_t CallTally::total_calls() const { return std::accumulate(calls.begin(), calls.end(), std::uint64_t{0}); }

std::uint64_t CallTally::total_nanoseconds() const {
  return std::accumulate(nanoseconds.begin(), nanoseconds.end(), std::uint64_t{0});
}

}  // namespace tessera
