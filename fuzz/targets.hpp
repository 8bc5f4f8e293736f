// The fuzz targets: each decodes arbitrary bytes into calls on one of Tessera's input surfaces and checks
// what the answers promise (docs/reliability.md, "Fuzzing"). The same functions run in the libFuzzer
// binaries (fuzz_main.cpp, clang) and in the regression test (tests/fuzz, GCC, the normal suite).
//
// A broken promise is a thrown Failure naming the target and what broke. The libFuzzer entry point turns it
// into an abort, so that libFuzzer keeps the input; the regression test turns it into a test failure. Every
// other way out (a sanitizer report, an uncaught exception, a crash) is a bug as well.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "tessera/trace.hpp"

namespace tessera::fuzz {

class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The trace readers. Each: a success is a trace that validate() accepts and that survives the text
// format (format_text_trace, parse_text_trace) unchanged; an error is Errc::invalid_argument naming the
// source.
int run_pytorch_snapshot(const std::uint8_t* data, std::size_t size);  // + the snapshot writer's round trip
int run_lifetimes_csv(const std::uint8_t* data, std::size_t size);
// The profiles: + one recorded total per event where there are any, and the peaks are their most.
int run_kineto_json(const std::uint8_t* data, std::size_t size);
int run_operator_memory_csv(const std::uint8_t* data, std::size_t size);
// torch_npu's memory_record.csv: records on lines after the header, each naming a device; the real
// allocator's totals taken from them (totals_from_memory_record) agree with the records.
int run_memory_record_csv(const std::uint8_t* data, std::size_t size);
int run_stalloc_trace(const std::uint8_t* data, std::size_t size);
int run_text_trace(const std::uint8_t* data, std::size_t size);  // + formatted text is stable
// parse_allocator_config: an accepted configuration makes an allocator and reads back the same from its
// canonical string; an error is Errc::invalid_argument starting "allocator configuration: ".
int run_allocator_config(const std::uint8_t* data, std::size_t size);
// Operation sequences on a TesseraAllocator over the host driver behind a FaultInjectingDriver, with the
// data oracle, the stream-contract witness and the invariant checks (targets.cpp has the byte format).
int run_allocator_ops(const std::uint8_t* data, std::size_t size);
// An export handle (core/export_handle.hpp) as another process would send it: the first byte says how many
// chunk descriptors come with it (its low four bits modulo 9: real memfds of 4 MiB) and which liveness
// descriptor follows them (bit 7: a gone exporter's, bit 6: a memfd, else a live exporter's); the rest is the
// handle. A refusal is Errc::invalid_argument
// naming the handle (or, once decoded, what does not add up or cannot be imported); an accepted handle
// encodes back to the same bytes, and an import that succeeds maps what it says and closes leaving nothing.
int run_export_handle(const std::uint8_t* data, std::size_t size);

// What one run of run_allocator_ops did, for tests that check a handwritten sequence does what it says.
struct OpsReport {
  std::size_t operations = 0;
  std::size_t allocations = 0;         // that succeeded
  std::size_t refused_allocations = 0;  // out of memory, injected failures, size 0
  std::size_t frees = 0;                // that succeeded, the drain's included
  std::size_t failed_calls = 0;         // other operations that answered an (injected) error
  std::uint64_t injected_faults = 0;    // driver calls the fault injector failed
};
OpsReport replay_allocator_ops(const std::uint8_t* data, std::size_t size);

// A seed for run_allocator_ops: the first allocs and frees of a trace, sizes scaled down to the fuzzed
// device, as operation bytes (at most `max_bytes` of them). `variant` picks the header's device and
// configuration.
std::string encode_allocator_ops(const Trace& trace, std::uint8_t variant, std::size_t max_bytes);

struct Target {
  std::string_view name;  // the directory under fuzz/regressions, and the binary fuzz_<name>
  int (*run)(const std::uint8_t* data, std::size_t size);
};

std::span<const Target> targets();

// The source name the readers get, which their errors must name.
inline constexpr std::string_view fuzz_source = "fuzz-input";

}  // namespace tessera::fuzz
