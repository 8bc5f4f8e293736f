#include "support/fork_guard.hpp"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace tessera::detail {

namespace {

struct Entry {
  ForkMember* member;
  ForkRank rank;
};

// Never destroyed: members may leave during static destruction, and a fork may come at any time.
struct Guard {
  std::mutex mutex;  // held from prepare to after: the members cannot change while a fork is under way
  std::vector<Entry> members;  // in rank order, lowest first; joining order within a rank
};

Guard& guard() {
  static auto* instance = new Guard;
  return *instance;
}

void prepare() {
  Guard& g = guard();
  g.mutex.lock();
  for (auto entry = g.members.rbegin(); entry != g.members.rend(); ++entry) entry->member->prepare_fork();
}

void in_parent() {
  Guard& g = guard();
  for (const Entry& entry : g.members) entry.member->after_fork_in_parent();
  g.mutex.unlock();
}

void in_child() {
  Guard& g = guard();
  for (const Entry& entry : g.members) entry.member->after_fork_in_child();
  g.mutex.unlock();  // the forking thread took it, and it is the child's only thread
}

}  // namespace

void install_fork_handlers() {
  static std::once_flag installed;
  std::call_once(installed, [] { pthread_atfork(prepare, in_parent, in_child); });
}

void join_fork_guard(ForkMember& member, ForkRank rank) {
  install_fork_handlers();
  Guard& g = guard();
  std::lock_guard lock(g.mutex);
  auto after = std::upper_bound(g.members.begin(), g.members.end(), rank,
                                [](ForkRank r, const Entry& entry) { return r < entry.rank; });
  g.members.insert(after, Entry{&member, rank});
}

void leave_fork_guard(ForkMember& member) {
  Guard& g = guard();
  std::lock_guard lock(g.mutex);
  std::erase_if(g.members, [&](const Entry& entry) { return entry.member == &member; });
}

}  // namespace tessera::detail
