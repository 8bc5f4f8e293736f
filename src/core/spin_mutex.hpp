// The allocator's lock. A test-and-test-and-set lock: taking it is one atomic exchange and releasing it one
// plain store, where std::mutex needs an atomic read-modify-write for each (to learn whether to wake a
// sleeper) — half the atomic operations on the fast path. A waiter spins briefly on a plain load, then
// yields its core: holders are short except on slow paths (a driver call, a synchronize), and there the
// waiter gives the core away instead of burning it.
#pragma once

#include <atomic>
#include <thread>

namespace tessera::core {

class SpinMutex {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (unsigned spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
          __builtin_ia32_pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace tessera::core
