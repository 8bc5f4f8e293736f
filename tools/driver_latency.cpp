// tessera-driver-latency: the wall-clock latency of each VMM call of a driver, per page size.
//
//   tessera-driver-latency --driver cuda --sizes 2MiB,20MiB --iterations 200 [--json out.json]
//
// Each iteration runs one full cycle through the public Driver interface, timing every call on its own:
// reserve(size), create_chunk(size), map, set_access, unmap, release_chunk, release_reservation. The first
// --warmup cycles are not recorded (they pay for lazy initialisation in the platform library). Nothing runs
// on the device in between, so no synchronization is needed before unmap. Reported per call kind and size:
// p50 and p99 (nearest rank), mean, min and max, in microseconds. These are the figures the sim driver's
// latency model wants from real hardware.
//
// Exit status: 0 done, 1 a driver call failed or the driver is unavailable, 2 bad arguments.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/sizes.hpp"
#include "tessera/drivers.hpp"

namespace {

using tessera::Bytes;
using tessera::DriverCall;

constexpr int exit_failed = 1;
constexpr int exit_usage = 2;

// The measured calls, in the order of one cycle.
constexpr std::array<DriverCall, 7> cycle = {
    DriverCall::reserve, DriverCall::create_chunk,  DriverCall::map,
    DriverCall::set_access, DriverCall::unmap, DriverCall::release_chunk, DriverCall::release_reservation};

std::string size_text(Bytes size) { return tessera::support::format_size(size); }

struct Figures {
  DriverCall call;
  Bytes size;
  std::size_t samples;
  double p50_us, p99_us, mean_us, min_us, max_us;
};

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double fraction) {
  const auto rank = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

Figures summarize(DriverCall call, Bytes size, std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const double sum = std::accumulate(samples.begin(), samples.end(), 0.0);
  return Figures{call,
                 size,
                 samples.size(),
                 percentile(samples, 0.50),
                 percentile(samples, 0.99),
                 sum / static_cast<double>(samples.size()),
                 samples.front(),
                 samples.back()};
}

// One cycle for one page size; each call's microseconds go to its slot when `record` is set.
tessera::Result<void> run_cycle(tessera::Driver& driver, Bytes size, bool record,
                                std::array<std::vector<double>, cycle.size()>& samples) {
  using clock = std::chrono::steady_clock;
  std::size_t slot = 0;
  auto timed = [&](auto&& call) {
    const auto start = clock::now();
    auto result = call();
    const auto stop = clock::now();
    if (record) samples[slot].push_back(std::chrono::duration<double, std::micro>(stop - start).count());
    ++slot;
    return result;
  };
  auto base = timed([&] { return driver.reserve(size); });
  if (!base) return std::move(base).error();
  auto page = timed([&] { return driver.create_chunk(size); });
  if (!page) return std::move(page).error();
  if (auto done = timed([&] { return driver.map(*base, *page); }); !done) return done;
  if (auto done = timed([&] { return driver.set_access(*base, size); }); !done) return done;
  if (auto done = timed([&] { return driver.unmap(*base); }); !done) return done;
  if (auto done = timed([&] { return driver.release_chunk(*page); }); !done) return done;
  if (auto done = timed([&] { return driver.release_reservation(*base); }); !done) return done;
  return {};
}

std::string json_report(const tessera::Driver& driver, int iterations, int warmup,
                        const std::vector<Figures>& figures) {
  std::string out = fmt::format(
      "{{\n  \"tool\": \"tessera-driver-latency\",\n  \"driver\": \"{}\",\n  \"granularity\": {},\n"
      "  \"capacity\": {},\n  \"iterations\": {},\n  \"warmup\": {},\n  \"unit\": \"microseconds\",\n"
      "  \"results\": [",
      driver.name(), driver.granularity(), driver.capacity(), iterations, warmup);
  for (std::size_t i = 0; i < figures.size(); ++i) {
    const Figures& f = figures[i];
    out += fmt::format(
        "{}\n    {{\"call\": \"{}\", \"size\": {}, \"size_text\": \"{}\", \"samples\": {}, \"p50_us\": {:.3f}, "
        "\"p99_us\": {:.3f}, \"mean_us\": {:.3f}, \"min_us\": {:.3f}, \"max_us\": {:.3f}}}",
        i == 0 ? "" : ",", tessera::to_string(f.call), f.size, size_text(f.size), f.samples, f.p50_us, f.p99_us,
        f.mean_us, f.min_us, f.max_us);
  }
  out += "\n  ]\n}\n";
  return out;
}

struct CloseFile {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measures the wall-clock latency of each VMM call of a Tessera driver, per page size."};
  app.name("tessera-driver-latency");
  std::string driver_name;
  std::string sizes_text = "2MiB,20MiB";
  int iterations = 200;
  int warmup = 1;
  int device = 0;
  std::string library;
  std::string json_path;
  app.add_option("--driver", driver_name, "host, sim, cuda or ascend")->required();
  app.add_option("--sizes", sizes_text, "comma-separated page sizes, e.g. 2MiB,20MiB")->capture_default_str();
  app.add_option("--iterations", iterations, "recorded cycles per size")->capture_default_str();
  app.add_option("--warmup", warmup, "unrecorded cycles per size before them")->capture_default_str();
  app.add_option("--device", device, "device ordinal for cuda and ascend")->capture_default_str();
  app.add_option("--library", library, "the platform library for cuda and ascend (default: libcuda.so.1, "
                 "libascendcl.so)");
  app.add_option("--json", json_path, "also write the figures to this file as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help
    fmt::print(stderr, "tessera-driver-latency: {}\n", error.what());
    return exit_usage;
  }

  const auto known = tessera::driver_names();
  if (std::find(known.begin(), known.end(), driver_name) == known.end()) {
    fmt::print(stderr, "tessera-driver-latency: --driver: unknown driver '{}' (expected one of {})\n", driver_name,
               fmt::join(known, ", "));
    return exit_usage;
  }
  if (iterations < 1 || warmup < 0) {
    fmt::print(stderr, "tessera-driver-latency: --iterations must be at least 1 and --warmup at least 0\n");
    return exit_usage;
  }
  std::vector<Bytes> sizes;
  for (const std::string& part : CLI::detail::split(sizes_text, ',')) {
    // Up to 2^50 bytes: a page size no driver reaches, and far from overflowing a reservation's arithmetic.
    const tessera::support::ParsedSize size = tessera::support::parse_size(part);
    if (!size || size.bytes == 0 || size.bytes > Bytes{1} << 50) {
      fmt::print(stderr,
                 "tessera-driver-latency: --sizes: bad size '{}' (expected a positive size up to 1024TiB: {})\n", part,
                 tessera::support::size_syntax);
      return exit_usage;
    }
    sizes.push_back(size.bytes);
  }

  auto made = tessera::make_driver(driver_name, {.device = device, .library = library});
  if (!made) {
    fmt::print(stderr, "tessera-driver-latency: {}\n", tessera::describe(made.error()));
    return exit_failed;
  }
  // Opened before measuring, so that a bad path costs no measurement, and after the driver came up, so
  // that a failed run leaves no empty file behind.
  std::unique_ptr<std::FILE, CloseFile> json_file;
  if (!json_path.empty()) {
    json_file.reset(std::fopen(json_path.c_str(), "w"));
    if (!json_file) {
      fmt::print(stderr, "tessera-driver-latency: --json: cannot write {}: {}\n", json_path, std::strerror(errno));
      return exit_usage;
    }
  }
  tessera::Driver& driver = **made;
  for (Bytes size : sizes) {
    if (!tessera::is_aligned(size, driver.granularity())) {
      fmt::print(stderr, "tessera-driver-latency: --sizes: {} is not a multiple of the {} driver's granule {}\n",
                 size_text(size), driver.name(), size_text(driver.granularity()));
      return exit_usage;
    }
  }

  std::vector<Figures> figures;
  for (Bytes size : sizes) {
    std::array<std::vector<double>, cycle.size()> samples;
    for (auto& slot : samples) slot.reserve(static_cast<std::size_t>(iterations));
    for (int i = 0; i < warmup + iterations; ++i) {
      if (auto done = run_cycle(driver, size, i >= warmup, samples); !done) {
        fmt::print(stderr, "tessera-driver-latency: cycle {} with {} pages failed: {}\n", i, size_text(size),
                   tessera::describe(done.error()));
        return exit_failed;
      }
    }
    for (std::size_t k = 0; k < cycle.size(); ++k) figures.push_back(summarize(cycle[k], size, std::move(samples[k])));
  }

  fmt::print("{} driver: granule {}, capacity {}; {} recorded cycles per size after {} warm-up\n", driver.name(),
             size_text(driver.granularity()), size_text(driver.capacity()), iterations, warmup);
  fmt::print("{:<20} {:>8} {:>10} {:>10} {:>10} {:>10}\n", "call", "size", "p50 us", "p99 us", "mean us", "max us");
  for (const Figures& f : figures) {
    fmt::print("{:<20} {:>8} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}\n", tessera::to_string(f.call),
               size_text(f.size), f.p50_us, f.p99_us, f.mean_us, f.max_us);
  }

  if (json_file) {
    const std::string text = json_report(driver, iterations, warmup, figures);
    const bool written = std::fwrite(text.data(), 1, text.size(), json_file.get()) == text.size();
    if (std::fclose(json_file.release()) != 0 || !written) {
      fmt::print(stderr, "tessera-driver-latency: --json: writing {} failed\n", json_path);
      return exit_failed;
    }
  }
  return 0;
}
