#include "core/tag_book.hpp"

#include <fmt/format.h>

namespace tessera::core {

TagBook::~TagBook() {
  for (const auto& [block, buffer] : backups_) mapper_.free_backup(buffer);
  free_kept_buffers();
}

TagBook::State* TagBook::state_of(TagId tag) noexcept {
  for (State& state : states_) {
    if (state.tag == tag) return &state;
  }
  return nullptr;
}

const TagBook::State* TagBook::state_of(TagId tag) const noexcept { return const_cast<TagBook*>(this)->state_of(tag); }

TagBook::State& TagBook::note_used(TagId tag) {
  if (State* state = state_of(tag)) return *state;
  return states_.emplace_back(State{tag});
}

void TagBook::set_paused(State& state, bool paused) noexcept {
  if (state.paused == paused) return;
  state.paused = paused;
  if (paused) {
    state.paused_before = true;
    ++paused_count_;
  } else {
    --paused_count_;
  }
}

std::vector<std::string> TagBook::names() const {
  std::vector<std::string> names;
  for (const State& state : states_) names.push_back(tag_name(state.tag));
  return names;
}

Result<TagId> TagBook::known(std::string_view name, std::string_view operation) const {
  if (auto tag = find_tag(name); tag && state_of(*tag) != nullptr) return *tag;
  std::string known;
  for (const State& state : states_) known += (known.empty() ? "'" : ", '") + tag_name(state.tag) + "'";
  return make_error(Errc::not_found, fmt::format("tessera: {} of tag {}: nothing was ever allocated under it here "
                                                 "(tags here: {})",
                                                 operation, quoted_tag_name(name), known.empty() ? "none" : known));
}

Result<HostBuffer> TagBook::buffer_for(Bytes size) {
  if (auto kept = cache_.take(size)) return *kept;
  return mapper_.allocate_backup(size);
}

void TagBook::drop_backup(const Block* block) {
  auto found = backups_.find(block);
  if (found == backups_.end()) return;
  release_buffer(found->second);
  backups_.erase(found);
}

void TagBook::release_buffer(const HostBuffer& buffer) {
  if (keep_buffers_) {
    cache_.keep(buffer);
  } else {
    mapper_.free_backup(buffer);
  }
}

void TagBook::keep_buffers_only_for(std::vector<Bytes> wanted) {
  for (const HostBuffer& buffer : cache_.keep_only_for(std::move(wanted))) mapper_.free_backup(buffer);
}

void TagBook::free_kept_buffers() {
  for (const HostBuffer& buffer : cache_.take_all()) mapper_.free_backup(buffer);
}

}  // namespace tessera::core
