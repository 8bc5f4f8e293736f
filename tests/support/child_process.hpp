// Runs a function in a child of fork() and reports how the child ended: its exit status, or that it hung.
// The child leaves with _exit(), so nothing of the test framework runs twice.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace tessera::test_support {

struct ChildEnd {
  bool hung = false;   // still running after the timeout: killed
  int exit_code = -1;  // the child's exit status; -1 when it died of a signal or hung
  int signal = 0;
};

inline std::string describe(const ChildEnd& end) {
  if (end.hung) return "the child hung and was killed";
  if (end.signal != 0) return "the child died of signal " + std::to_string(end.signal);
  return "the child exited with " + std::to_string(end.exit_code);
}

// Forks; the child runs `body` and leaves with its return value as exit status (0: every check held).
inline pid_t start_child(const std::function<int()>& body) {
  const pid_t child = fork();
  if (child == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    _exit(code);
  }
  return child;
}

inline ChildEnd wait_for_child(pid_t child, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  ChildEnd end;
  if (child < 0) return end;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      end.hung = true;
      return end;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFEXITED(status)) end.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) end.signal = WTERMSIG(status);
  return end;
}

inline ChildEnd run_in_child(const std::function<int()>& body,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  return wait_for_child(start_child(body), timeout);
}

}  // namespace tessera::test_support
