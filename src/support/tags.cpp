#include "tessera/tags.hpp"

#include <deque>
#include <mutex>
#include <unordered_map>

namespace tessera {

namespace {

// Names never go away: a TagId stays valid for the life of the process. A deque keeps each name where it
// is as more are added, so the map's keys may view them.
struct TagRegistry {
  std::mutex mutex;
  std::deque<std::string> names{std::string(default_tag_name)};
  std::unordered_map<std::string_view, TagId> ids{{names.front(), default_tag}};
};

TagRegistry& registry() {
  static TagRegistry* const instance = new TagRegistry;  // never destroyed: threads may allocate at exit
  return *instance;
}

thread_local std::vector<TagId> open_tags;
// Read at every allocation: the initial-exec model makes it one load from the thread pointer, also inside
// libtessera_c.so (four bytes of the static TLS that glibc keeps spare for libraries loaded later).
thread_local TagId innermost __attribute__((tls_model("initial-exec"))) = default_tag;

}  // namespace

TagId intern_tag(std::string_view name) {
  if (name.empty()) return default_tag;
  TagRegistry& tags = registry();
  std::lock_guard lock(tags.mutex);
  if (auto found = tags.ids.find(name); found != tags.ids.end()) return found->second;
  const auto id = static_cast<TagId>(tags.names.size());
  tags.names.emplace_back(name);
  tags.ids.emplace(tags.names.back(), id);
  return id;
}

std::optional<TagId> find_tag(std::string_view name) {
  TagRegistry& tags = registry();
  std::lock_guard lock(tags.mutex);
  if (auto found = tags.ids.find(name); found != tags.ids.end()) return found->second;
  return std::nullopt;
}

std::string tag_name(TagId tag) {
  TagRegistry& tags = registry();
  std::lock_guard lock(tags.mutex);
  return tag < tags.names.size() ? tags.names[tag] : std::string("?");
}

void push_tag(std::string_view name) {
  const TagId tag = intern_tag(name);
  open_tags.push_back(tag);
  innermost = tag;
}

bool pop_tag() noexcept {
  if (open_tags.empty()) return false;
  open_tags.pop_back();
  innermost = open_tags.empty() ? default_tag : open_tags.back();
  return true;
}

TagId current_tag() noexcept { return innermost; }

}  // namespace tessera
