#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace tessera::cli {

namespace {

constexpr std::size_t bar_width = 30;
constexpr std::size_t what_width = 40;
// Redrawing faster than a terminal can show it only costs time.
constexpr auto redraw_interval = std::chrono::milliseconds(100);

}  // namespace

Progress::Progress(std::string label, std::size_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(total > 0 && isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { finish(); }

void Progress::advance(std::string_view what) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  ++done_;
  draw(what, done_ == total_);
}

void Progress::finish() {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  if (drawn_) {
    std::fputs("\r\033[K", stderr);  // carriage return, erase the line
    std::fflush(stderr);
    drawn_ = false;
  }
}

void Progress::draw(std::string_view what, bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && drawn_ && now - last_draw_ < redraw_interval) return;
  last_draw_ = now;
  const std::size_t filled = total_ == 0 ? bar_width : bar_width * done_ / total_;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  std::string shown(what.substr(0, what_width));
  fmt::print(stderr, "\r\033[K{} [{:#<{}}{:-<{}}] {}/{} {:.0f}s {}", label_, "", filled, "", bar_width - filled, done_,
             total_, seconds, shown);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace tessera::cli
