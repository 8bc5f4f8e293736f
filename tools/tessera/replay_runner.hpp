// Runs every trace with every allocator — what `replay` and `demo` share. Jobs run on several threads
// (each replay has its own driver and allocator, so they share nothing), with a progress bar on stderr.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/replay.hpp"

namespace tessera::cli {

struct ReplayPlan {
  std::vector<std::string> allocators;  // the reference lines are computed from the trace, the others replayed
  ReplayOptions options;                // allocator is set per job
  bool min_capacity = false;            // bisect for min_capacity and overhead
  unsigned jobs = 1;                    // threads
};

// Results trace by trace, allocators in the plan's order. A replay that fails (an error, not an
// out-of-memory answer, or an exception such as std::bad_alloc) is a result with `failure` set, naming the
// event; the other replays run on.
std::vector<ReplayResult> run_replays(const std::vector<Trace>& traces, const ReplayPlan& plan);

// Prints "<command>: <file> with <allocator>: <failure>" on stderr for every failed result; `sources` pairs
// each trace's name in the results with its file (a trace not there, a generated one, goes by its name).
// True when no result failed.
bool report_failures(std::span<const ReplayResult> results,
                     std::span<const std::pair<std::string, std::string>> sources, std::string_view command);

// Reports group results by trace name: two traces of one name (two folders' "model.pickle") get "#2", "#3".
void make_names_unique(std::vector<Trace>& traces);

// The allocators a command may name, checked against replay_allocator_names(); "all" or an empty list
// means every one. Throws UsageError naming `option` and the unknown name.
std::vector<std::string> resolve_allocators(const std::vector<std::string>& names, std::string_view option);

// One replay at a time by default: host ns/op is a wall-clock measurement, and replays running beside it
// on shared cores inflate it.
inline constexpr const char* jobs_help = "Replays run at once; more is faster, but inflates host ns/op";

}  // namespace tessera::cli
