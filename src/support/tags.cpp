#include "tessera/tags.hpp"

#include <fmt/format.h>

#include <deque>
#include <mutex>
#include <stdexcept>
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

struct OpenTag {
  TagId tag;
  OnPause on_pause;
};
thread_local std::vector<OpenTag> open_tags;

std::uint32_t word_of(OpenTag open) {
  return open.tag | (open.on_pause == OnPause::back_up ? detail::back_up_bit : 0U);
}

// The length of the UTF-8 sequence at `at` (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF);
// 0 when the bytes there are not one.
std::size_t utf8_sequence(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;  // the range of the second byte; the later ones are always 80..BF
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (at + length > text.size()) return 0;
  if (byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (byte(at + i) < 0x80 || byte(at + i) > 0xBF) return 0;
  }
  return length;
}

}  // namespace

thread_local std::uint32_t detail::innermost_tag = default_tag;

std::string quoted_tag_name(std::string_view name) {
  std::string shown = "'";
  for (const char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F && c != '\\') {
      shown += c;
    } else {
      shown += fmt::format("\\x{:02x}", byte);
    }
  }
  return shown + "'";
}

Result<void> check_tag_name(std::string_view name) {
  auto refuse = [&](std::string why) {
    return make_error(Errc::invalid_argument, fmt::format("tag {} is refused: {}", quoted_tag_name(name), why));
  };
  if (name.size() > max_tag_name_bytes) {
    return refuse(fmt::format("it is {} bytes long, more than the {} a tag may have", name.size(), max_tag_name_bytes));
  }
  for (std::size_t at = 0; at < name.size();) {
    const auto byte = static_cast<unsigned char>(name[at]);
    if (byte == 0) return refuse(fmt::format("it holds a NUL byte at offset {}", at));
    if (byte < 0x20 || byte == 0x7F) {
      return refuse(fmt::format("it holds the control byte 0x{:02x} at offset {}", byte, at));
    }
    const std::size_t length = utf8_sequence(name, at);
    if (length == 0) return refuse(fmt::format("it is not valid UTF-8 (byte 0x{:02x} at offset {})", byte, at));
    at += length;
  }
  return {};
}

Result<TagId> intern_tag(std::string_view name) {
  if (name.empty()) return default_tag;
  if (auto checked = check_tag_name(name); !checked) return std::move(checked).error();
  TagRegistry& tags = registry();
  std::lock_guard lock(tags.mutex);
  if (auto found = tags.ids.find(name); found != tags.ids.end()) return found->second;
  if (tags.names.size() >= detail::back_up_bit) {
    return make_error(Errc::invalid_argument, fmt::format("tag {} is refused: the process has {} tags, the most it "
                                                          "can hold",
                                                          quoted_tag_name(name), tags.names.size()));
  }
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

Result<void> push_tag(std::string_view name, OnPause on_pause) {
  auto tag = intern_tag(name);
  if (!tag) return std::move(tag).error();
  open_tags.push_back({*tag, on_pause});
  detail::innermost_tag = word_of(open_tags.back());
  return {};
}

bool pop_tag() noexcept {
  if (open_tags.empty()) return false;
  open_tags.pop_back();
  detail::innermost_tag = open_tags.empty() ? default_tag : word_of(open_tags.back());
  return true;
}

TagScope::TagScope(std::string_view name, OnPause on_pause) {
  if (auto pushed = push_tag(name, on_pause); !pushed) throw std::invalid_argument(pushed.error().message);
}

}  // namespace tessera
