// A progress bar on stderr for runs that take a while: drawn only when stderr is a terminal, so that logs
// and pipes get none of it. Safe to advance from several threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

namespace tessera::cli {

class Progress {
 public:
  Progress(std::string label, std::size_t total);
  ~Progress();  // clears the bar
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool enabled() const noexcept { return enabled_; }
  // One step done; `what` names the step that finished.
  void advance(std::string_view what);
  // Clears the bar so that other output can follow.
  void finish();

 private:
  void draw(std::string_view what, bool force);

  std::mutex mutex_;
  std::string label_;
  std::size_t total_;
  std::size_t done_ = 0;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace tessera::cli
