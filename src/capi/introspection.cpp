// What PyTorch's memory_stats(), memory_summary(), _record_memory_history() and _dump_snapshot() refuse to
// give for a pluggable allocator: statistics as a struct and as JSON with PyTorch's key names, a text
// summary, the allocation history and the snapshot file.
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "capi/guard.hpp"
#include "capi/last_error.hpp"
#include "capi/registry.hpp"
#include "tessera/tessera_c.h"
#include "tessera/trace.hpp"

namespace tessera::capi {
namespace {

struct DeviceReport {
  std::string driver;  // "" when the device has no allocator
  TesseraStats stats;
  Usage usage;
  Bytes capacity = 0;
  std::uint64_t bad_frees = 0;
};

DeviceReport report_of(int index) {
  DeviceReport report;
  if (const Device* device = existing_device(index)) {
    report.driver = device->driver_name;
    report.stats = device->allocator->tessera_stats();
    report.usage = device->allocator->usage();
    report.capacity = device->driver->capacity();
    report.bad_frees = device->bad_frees.load(std::memory_order_relaxed);
  }
  return report;
}

bool check_index(std::string_view function, int index) {
  if (index >= 0 && index < max_devices) return true;
  set_last_error(Errc::invalid_argument, fmt::format("{}: {}", function, device_out_of_range(index).message));
  return false;
}

void fill(const DeviceReport& report, tessera_memory_stats& out) {
  const AllocatorStats& common = report.stats.common;
  const PoolUsage& all = report.usage.all;
  out = tessera_memory_stats{};
  // The peaks are the allocator's usage's, which tessera_reset_peak_memory_stats starts again.
  out.allocated_bytes = common.allocated_bytes;
  out.allocated_bytes_peak = all.allocated_bytes.peak;
  out.requested_bytes = common.requested_bytes;
  out.requested_bytes_peak = all.requested_bytes.peak;
  out.reserved_bytes = common.reserved_bytes;
  out.reserved_bytes_peak = report.usage.reserved_bytes.peak;
  out.allocations = all.allocation.current;
  out.allocations_peak = all.allocation.peak;
  out.allocations_total = all.allocation.allocated;
  out.frees_total = all.allocation.freed;
  out.num_alloc_retries = common.num_alloc_retries;
  out.num_ooms = common.num_ooms;
  out.num_sync_all_streams = common.num_sync_all_streams;
  out.num_device_alloc = common.num_device_alloc;
  out.num_device_free = common.num_device_free;
  out.mapped_bytes = report.stats.mapped_bytes;
  out.pooled_bytes = report.stats.pooled_bytes;
  out.cached_bytes = report.stats.cached_bytes;
  out.pages_mapped = report.stats.pages_mapped;
  out.pages_unmapped = report.stats.pages_unmapped;
  out.stitches = report.stats.stitches;
  out.pages_stitched = report.stats.pages_stitched;
  out.pages_reclaimed = report.stats.pages_reclaimed;
  out.syncs = report.stats.syncs;
  out.bad_frees = report.bad_frees;
  out.capacity = report.capacity;
}

void put_counter(nlohmann::json& json, const std::string& prefix, const Stat& counter) {
  json[prefix + ".current"] = counter.current;
  json[prefix + ".peak"] = counter.peak;
  json[prefix + ".allocated"] = counter.allocated;
  json[prefix + ".freed"] = counter.freed;
}

// inactive_split* of the small pool, the large pool and both: read from the allocator's state now, so the
// current value only (a peak would need the figure after every change, and it changes at most of them).
PoolStats inactive_split_of(const DeviceReport& report, std::size_t pool_index) {
  const auto& pools = report.stats.pools;
  if (pool_index < pools.size()) return pools[pool_index];
  PoolStats both;
  for (const PoolStats& pool : pools) {
    both.inactive_split_bytes += pool.inactive_split_bytes;
    both.inactive_split += pool.inactive_split;
  }
  return both;
}

std::string stats_json(const DeviceReport& report) {
  nlohmann::json json = nlohmann::json::object();
  struct Pool {
    const char* name;
    const PoolUsage* usage;
    std::size_t index;  // in TesseraStats::pools; 2: both
  };
  const std::array<Pool, 3> pools{{{"all", &report.usage.all, 2},
                                   {"small_pool", &report.usage.small_pool, static_cast<std::size_t>(SizePool::small)},
                                   {"large_pool", &report.usage.large_pool, static_cast<std::size_t>(SizePool::large)}}};
  for (const Pool& pool : pools) {
    put_counter(json, fmt::format("allocation.{}", pool.name), pool.usage->allocation);
    put_counter(json, fmt::format("allocated_bytes.{}", pool.name), pool.usage->allocated_bytes);
    put_counter(json, fmt::format("requested_bytes.{}", pool.name), pool.usage->requested_bytes);
    put_counter(json, fmt::format("active.{}", pool.name), pool.usage->active);
    put_counter(json, fmt::format("active_bytes.{}", pool.name), pool.usage->active_bytes);
    put_counter(json, fmt::format("segment.{}", pool.name), pool.usage->segment);
    // Pooled pages belong to no pool: the aggregate is every page held, the pools what their segments map.
    put_counter(json, fmt::format("reserved_bytes.{}", pool.name),
                pool.index == 2 ? report.usage.reserved_bytes : pool.usage->mapped_bytes);
    const PoolStats split = inactive_split_of(report, pool.index);
    json[fmt::format("inactive_split_bytes.{}.current", pool.name)] = split.inactive_split_bytes;
    json[fmt::format("inactive_split.{}.current", pool.name)] = split.inactive_split;
  }
  const AllocatorStats& common = report.stats.common;
  json["num_alloc_retries"] = common.num_alloc_retries;
  json["num_ooms"] = common.num_ooms;
  json["num_sync_all_streams"] = common.num_sync_all_streams;
  json["num_device_alloc"] = common.num_device_alloc;
  json["num_device_free"] = common.num_device_free;
  json["tessera.driver"] = report.driver;
  json["tessera.capacity"] = report.capacity;
  json["tessera.mapped_bytes"] = report.stats.mapped_bytes;
  json["tessera.pooled_bytes"] = report.stats.pooled_bytes;
  json["tessera.cached_bytes"] = report.stats.cached_bytes;
  json["tessera.pages_mapped"] = report.stats.pages_mapped;
  json["tessera.pages_unmapped"] = report.stats.pages_unmapped;
  json["tessera.stitches"] = report.stats.stitches;
  json["tessera.pages_stitched"] = report.stats.pages_stitched;
  json["tessera.pages_reclaimed"] = report.stats.pages_reclaimed;
  json["tessera.syncs"] = report.stats.syncs;
  json["tessera.shared_blocks"] = report.stats.shared_blocks;
  json["tessera.slivers_shared"] = report.stats.slivers_shared;
  json["tessera.sliver_mapped_bytes"] = report.stats.sliver_mapped_bytes;
  json["tessera.backup_cache_bytes"] = report.stats.backup_cache_bytes;
  json["tessera.bad_frees"] = report.bad_frees;
  json["tessera.pauses"] = report.stats.pauses;
  json["tessera.resumes"] = report.stats.resumes;
  json["tessera.private_pools"] = report.stats.private_pools;
  json["tessera.private_pool_mapped_bytes"] = report.stats.private_pool_mapped_bytes;
  for (const TagStats& tag : report.stats.tags) {
    const std::string prefix = "tessera.tag." + tag.tag;
    json[prefix + ".paused"] = tag.paused ? 1 : 0;
    json[prefix + ".allocated_bytes"] = tag.allocated_bytes;
    json[prefix + ".reserved_bytes"] = tag.reserved_bytes;
    json[prefix + ".paused_bytes"] = tag.paused_bytes;
    json[prefix + ".backup_bytes"] = tag.backup_bytes;
  }
  // Tag names are checked where they enter (tags.hpp); a byte that is not UTF-8 still never makes the whole
  // statistics unreadable: it is written as U+FFFD.
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// As PyTorch's memory_summary formats sizes: whole units, the unit growing once the number passes 768 Ki.
std::string format_size(std::uint64_t bytes) {
  constexpr std::array<const char*, 6> units{"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  while (unit + 1 < units.size() && bytes >= 768 * KiB) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{} {}", bytes, units[unit]);
}

std::string summary(int index, const DeviceReport& report) {
  const int width = 83;  // the rows: "| " + 24 + "|" + 4 columns of " {:>11} |"
  const std::string rule_heavy = "|" + std::string(width - 2, '=') + "|\n";
  const std::string rule = "|" + std::string(width - 2, '-') + "|\n";
  std::string text;
  auto line = [&](std::string_view content) { text += fmt::format("| {:<{}} |\n", content, width - 4); };
  auto row = [&](std::string_view metric, const std::string& a, const std::string& b, const std::string& c,
                 const std::string& d) {
    text += fmt::format("| {:<24}| {:>11} | {:>11} | {:>11} | {:>11} |\n", metric, a, b, c, d);
  };
  auto bytes_row = [&](std::string_view metric, const Stat& counter) {
    row(metric, format_size(counter.current), format_size(counter.peak), format_size(counter.allocated),
        format_size(counter.freed));
  };
  auto count_row = [&](std::string_view metric, const Stat& counter) {
    row(metric, std::to_string(counter.current), std::to_string(counter.peak), std::to_string(counter.allocated),
        std::to_string(counter.freed));
  };
  text += rule_heavy;
  line(report.driver.empty()
           ? fmt::format("Tessera memory summary, device {}: no allocator yet (nothing allocated)", index)
           : fmt::format("Tessera memory summary, device {}, {} driver", index, report.driver));
  text += rule;
  row("Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed");
  text += rule;
  const Usage& usage = report.usage;
  auto pools_rows = [&](auto&& print, std::string_view metric, Stat PoolUsage::*measure) {
    print(metric, usage.all.*measure);
    print("      from large pool", usage.large_pool.*measure);
    print("      from small pool", usage.small_pool.*measure);
  };
  pools_rows(bytes_row, "Allocated memory", &PoolUsage::allocated_bytes);
  pools_rows(bytes_row, "Active memory", &PoolUsage::active_bytes);
  bytes_row("Requested memory", usage.all.requested_bytes);
  text += rule;
  pools_rows(count_row, "Allocations", &PoolUsage::allocation);
  pools_rows(count_row, "Active allocs", &PoolUsage::active);
  text += rule;
  bytes_row("Reserved memory", usage.reserved_bytes);  // the pools' rows: mapped under their segments
  bytes_row("      from large pool", usage.large_pool.mapped_bytes);
  bytes_row("      from small pool", usage.small_pool.mapped_bytes);
  row("      pooled (unmapped)", format_size(report.stats.pooled_bytes), "", "", "");
  row("      cached (unused)", format_size(report.stats.cached_bytes), "", "", "");
  const PoolStats split = inactive_split_of(report, 2);
  row("Non-releasable memory", format_size(split.inactive_split_bytes), "", "", "");
  pools_rows(count_row, "Segments", &PoolUsage::segment);
  row("Non-releasable blocks", std::to_string(split.inactive_split), "", "", "");
  text += rule;
  const AllocatorStats& common = report.stats.common;
  line(fmt::format("Capacity: {}   Pages created: {}   released: {}", format_size(report.capacity),
                   common.num_device_alloc, common.num_device_free));
  line(fmt::format("Pages mapped: {}   unmapped: {}   stitches: {} ({} pages)   reclaimed: {}",
                   report.stats.pages_mapped, report.stats.pages_unmapped, report.stats.stitches,
                   report.stats.pages_stitched, report.stats.pages_reclaimed));
  line(fmt::format("Syncs: {}   Alloc retries: {}   OOMs: {}   Bad frees: {}", report.stats.syncs,
                   common.num_alloc_retries, common.num_ooms, report.bad_frees));
  text += rule_heavy;
  return text;
}

}  // namespace
}  // namespace tessera::capi

using namespace tessera;
using namespace tessera::capi;

extern "C" {

int tessera_get_memory_stats(int device, tessera_memory_stats* out) {
  return guarded("tessera_get_memory_stats", -1, [&] {
    if (out == nullptr) {
      set_last_error(Errc::invalid_argument, "tessera_get_memory_stats: the output pointer is null");
      return -1;
    }
    if (!check_index("tessera_get_memory_stats", device)) return -1;
    fill(report_of(device), *out);
    return 0;
  });
}

const char* tessera_memory_stats_json(int device) {
  thread_local std::string json;
  return guarded("tessera_memory_stats_json", static_cast<const char*>(nullptr), [&]() -> const char* {
    if (!check_index("tessera_memory_stats_json", device)) return nullptr;
    json = stats_json(report_of(device));
    return json.c_str();
  });
}

const char* tessera_memory_summary(int device) {
  thread_local std::string text;
  return guarded("tessera_memory_summary", static_cast<const char*>(nullptr), [&]() -> const char* {
    if (!check_index("tessera_memory_summary", device)) return nullptr;
    text = summary(device, report_of(device));
    return text.c_str();
  });
}

int tessera_reset_peak_memory_stats(int device) {
  return guarded("tessera_reset_peak_memory_stats", -1, [&] {
    if (!check_index("tessera_reset_peak_memory_stats", device)) return -1;
    if (Device* found = existing_device(device)) found->allocator->reset_peak_usage();
    return 0;
  });
}

int tessera_record_memory_history(size_t max_entries) {
  return guarded("tessera_record_memory_history", -1, [&] {
    set_history(max_entries);
    return 0;
  });
}

int tessera_dump_snapshot(const char* path, int device) {
  return guarded("tessera_dump_snapshot", -1, [&] {
    if (path == nullptr || *path == '\0') {
      set_last_error(Errc::invalid_argument, "tessera_dump_snapshot: no path given");
      return -1;
    }
    if (!check_index("tessera_dump_snapshot", device)) return -1;
    const Device* found = existing_device(device);
    if (found == nullptr) {
      set_last_error(Errc::not_found,
                     fmt::format("tessera_dump_snapshot({}): device {} has no allocator yet: nothing was allocated "
                                 "there through Tessera",
                                 path, device));
      return -1;
    }
    auto written = write_history_snapshot(found->allocator->history(), path, device);
    if (!written) {
      set_last_error(written.error().code, fmt::format("tessera_dump_snapshot({}): {}", path, describe(written.error())));
      return -1;
    }
    return 0;
  });
}

}  // extern "C"
