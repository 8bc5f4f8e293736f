#include "replay_runner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <new>
#include <optional>
#include <thread>

#include "progress.hpp"
#include "usage_error.hpp"

namespace tessera::cli {

void make_names_unique(std::vector<Trace>& traces) {
  std::map<std::string, std::size_t> seen;
  for (Trace& trace : traces) {
    const std::size_t count = ++seen[trace.name];
    if (count > 1) trace.name = fmt::format("{} #{}", trace.name, count);
  }
}

std::vector<std::string> resolve_allocators(const std::vector<std::string>& names, std::string_view option) {
  const std::vector<std::string_view> known = replay_allocator_names();
  if (names.empty() || (names.size() == 1 && names.front() == "all")) {
    return {known.begin(), known.end()};
  }
  std::vector<std::string> chosen;
  for (const std::string& name : names) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw UsageError(
          fmt::format("{}: unknown allocator '{}' (expected {} or all)", option, name, fmt::join(known, ", ")));
    }
    if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) chosen.push_back(name);
  }
  return chosen;
}

namespace {

// One job: a reference line, a replay, or a replay and its bisection. Never throws: whatever goes wrong is
// the result's failure.
ReplayResult run_job(const Trace& trace, const std::string& allocator, const ReplayPlan& plan) {
  auto failed = [&](std::string why) {
    ReplayResult result;
    result.trace = trace.name;
    result.allocator = allocator;
    result.driver = plan.options.driver;
    result.capacity = plan.options.capacity;
    result.failure = std::move(why);
    return result;
  };
  try {
    if (auto reference = reference_result(allocator, trace, plan.options.granularity, plan.options.series_points)) {
      return std::move(*reference);
    }
    ReplayOptions options = plan.options;
    options.allocator = allocator;
    auto result = plan.min_capacity ? replay_with_min_capacity(trace, options) : replay(trace, options);
    if (!result) return failed(std::move(result).error().message);
    return std::move(result).value();
  } catch (const std::bad_alloc&) {
    return failed("the host ran out of memory (std::bad_alloc)");
  } catch (const std::exception& exception) {
    return failed(fmt::format("exception: {}", exception.what()));
  }
}

}  // namespace

std::vector<ReplayResult> run_replays(const std::vector<Trace>& traces, const ReplayPlan& plan) {
  const std::size_t per_trace = plan.allocators.size();
  const std::size_t total = traces.size() * per_trace;
  std::vector<std::optional<ReplayResult>> slots(total);
  // Longest traces first, so that no thread is left with a long one at the end while the others idle.
  std::vector<std::size_t> order(total);
  for (std::size_t i = 0; i < total; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return traces[a / per_trace].events.size() > traces[b / per_trace].events.size();
  });

  Progress progress(plan.min_capacity ? "replaying + min capacity" : "replaying", total);
  std::atomic<std::size_t> next{0};

  auto work = [&] {
    for (;;) {
      const std::size_t taken = next.fetch_add(1);
      if (taken >= total) return;
      const std::size_t job = order[taken];
      const Trace& trace = traces[job / per_trace];
      const std::string& allocator = plan.allocators[job % per_trace];
      slots[job] = run_job(trace, allocator, plan);
      progress.advance(fmt::format("{} {}", allocator, trace.name));
    }
  };
  const unsigned threads =
      static_cast<unsigned>(std::clamp<std::size_t>(plan.jobs, 1, std::max<std::size_t>(total, 1)));
  {
    std::vector<std::jthread> pool;
    for (unsigned i = 1; i < threads; ++i) pool.emplace_back(work);
    work();
  }
  progress.finish();
  std::vector<ReplayResult> results;
  results.reserve(total);
  for (auto& slot : slots) results.push_back(std::move(*slot));
  return results;
}

bool report_failures(std::span<const ReplayResult> results,
                     std::span<const std::pair<std::string, std::string>> sources, std::string_view command) {
  bool none = true;
  for (const ReplayResult& result : results) {
    if (result.failure.empty()) continue;
    none = false;
    std::string source = result.trace;
    for (const auto& [name, path] : sources) {
      if (name == result.trace) source = path;
    }
    fmt::print(stderr, "{}: {} with {}: {}\n", command, source, result.allocator, result.failure);
  }
  return none;
}

}  // namespace tessera::cli
