// The allocator's lock. Taking it is one atomic exchange and releasing it one plain store, where std::mutex
// needs an atomic read-modify-write for each (to learn whether a sleeper must be woken): half the atomic
// operations of an allocate+free pair, the largest single cost of the fast path (docs/benchmarks.md).
// The price is that a waiter is never woken: it spins briefly on a plain load, then yields its core, then
// naps in short steps. The lock is held for a few dozen nanoseconds on the fast path; on slow paths (a driver
// call, a stream synchronize) it may be held for milliseconds, and there a waiter naps instead of burning a
// core, at the cost of waking up to one nap late.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace tessera::core {

class SpinMutex {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (unsigned round = 0; locked_.load(std::memory_order_relaxed); ++round) {
        if (round < 64) {
          pause();
        } else if (round < 128) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<bool> locked_{false};
};

}  // namespace tessera::core
