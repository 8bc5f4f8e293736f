// The history's stack capture (TesseraAllocator::set_history_stacks): whether it runs, read before the
// allocator's lock is taken (off, an allocation pays this one relaxed load), and the capture itself, run
// outside every lock, since it may wait for an interpreter whose other threads allocate meanwhile.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "core/spin_mutex.hpp"
#include "tessera/allocator.hpp"

namespace tessera::core {

class StackCapturer {
 public:
  using Capture = TesseraAllocator::StackCapture;

  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }
  // The capture (empty: none); it runs only while the history records.
  void set(Capture capture, bool recording) {
    std::lock_guard lock(mutex_);
    capture_ = capture ? std::make_shared<const Capture>(std::move(capture)) : nullptr;
    on_.store(recording && capture_ != nullptr, std::memory_order_relaxed);
  }
  void set_recording(bool recording) {
    std::lock_guard lock(mutex_);
    on_.store(recording && capture_ != nullptr, std::memory_order_relaxed);
  }
  // The stack of the allocation about to be made: null when no capture is set or it gave none.
  std::shared_ptr<const Stack> take() {
    std::shared_ptr<const Capture> capture;
    {
      std::lock_guard lock(mutex_);
      capture = capture_;
    }
    return capture ? (*capture)() : nullptr;
  }

 private:
  std::atomic<bool> on_{false};
  SpinMutex mutex_;
  std::shared_ptr<const Capture> capture_;
};

}  // namespace tessera::core
