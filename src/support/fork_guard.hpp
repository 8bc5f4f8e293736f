// fork() and Tessera. A child process starts with a copy of every allocator's bookkeeping and, on the host
// driver, with mappings of the parent's memfd (MAP_SHARED): without care both would hand out the same free
// ranges and write the same bytes, and a lock another thread held at the fork stays held in the child for
// ever. Whatever holds such a lock or such memory joins the fork guard, and one pthread_atfork handler calls
// the members in rank order: before the fork from the top rank down — each allocator's lock, then the
// observers it calls under that lock, then each driver (which copies its memory for the child) — so that a
// lock is always taken before the locks of what it calls into; after the fork, in the parent and in the
// child, from the bottom up.
//
// A member may not join or leave while it holds a lock that a member's prepare_fork() takes. Code above
// the guard that creates members under a lock of its own (the C ABI's registry) takes that lock in a
// pthread_atfork handler registered after install_fork_handlers(), so that it runs before the guard's.
//
// In the support layer, below both the drivers and the allocators that join it: the allocator's policy
// inherits nothing from the driver layer and calls a driver only through its mapper.
#pragma once

#include <cstdint>

namespace tessera::detail {

enum class ForkRank : std::uint8_t { driver, observer, allocator };

class ForkMember {
 public:
  virtual void prepare_fork() noexcept = 0;         // in the parent, before fork(): take locks, copy memory
  virtual void after_fork_in_parent() noexcept = 0;  // release what prepare_fork() took
  virtual void after_fork_in_child() noexcept = 0;   // release it too, and make the child's state its own

 protected:
  ~ForkMember() = default;
};

// The member must leave before it is destroyed; leaving twice is harmless.
void join_fork_guard(ForkMember& member, ForkRank rank);
void leave_fork_guard(ForkMember& member);

// Registers the guard's pthread_atfork handler (once per process; joining does it too).
void install_fork_handlers();

// Membership for an object's lifetime.
class ForkGuardMembership {
 public:
  ForkGuardMembership(ForkMember& member, ForkRank rank) : member_(member) { join_fork_guard(member, rank); }
  ~ForkGuardMembership() { leave_fork_guard(member_); }
  ForkGuardMembership(const ForkGuardMembership&) = delete;
  ForkGuardMembership& operator=(const ForkGuardMembership&) = delete;

 private:
  ForkMember& member_;
};

}  // namespace tessera::detail
