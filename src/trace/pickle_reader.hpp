// A small pickle virtual machine: enough of Python's pickle protocols 2 to 5 to read plain data (dicts,
// lists, tuples, sets, strings, bytes, numbers, booleans, None), which is all a PyTorch memory snapshot
// holds. Classes, globals and reduce calls are refused, so reading a pickle never runs anything.
//
// The values live in one arena and refer to each other by index, as the pickle's memo does: a list fetched
// twice from the memo is one list, and building or freeing the tree never recurses.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/result.hpp"

namespace tessera::trace_detail {

enum class PickleKind : std::uint8_t {
  none,
  boolean,
  integer,      // fits in int64
  big_integer,  // LONG1/LONG4 beyond int64: kept as a kind, refused only where a number is needed
  real,
  string,
  bytes,
  list,
  tuple,
  dict,  // items are key, value, key, value ... in insertion order; a repeated key keeps its place and its
         // last value, as in Python
  set,   // set and frozenset
};

std::string_view to_string(PickleKind kind) noexcept;

using PickleRef = std::uint32_t;

class PickleTree {
 public:
  PickleRef root() const noexcept { return root_; }
  PickleKind kind(PickleRef value) const { return nodes_[value].kind; }

  std::optional<std::int64_t> integer(PickleRef value) const;  // integers and booleans
  std::optional<double> real(PickleRef value) const;           // reals and integers
  std::optional<bool> boolean(PickleRef value) const;
  std::optional<std::string_view> string(PickleRef value) const;  // strings and bytes
  // The items of a list, tuple or set; a dict's keys and values interleaved. Empty for scalars.
  std::span<const PickleRef> items(PickleRef value) const;
  std::size_t size(PickleRef value) const;  // items, or pairs for a dict
  // The value a dict holds under a string key (the last one set). Its cost does not grow with the dict.
  std::optional<PickleRef> find(PickleRef dict, std::string_view key) const;

  std::size_t node_count() const noexcept { return nodes_.size(); }

 private:
  friend class PickleMachine;

  struct Node {
    PickleKind kind = PickleKind::none;
    std::uint32_t payload = 0;  // index into strings_ or containers_
    std::int64_t number = 0;    // integer, boolean, or a real's bits
  };

  // Python's dict keeps one pair per key, so a pickle that sets a key again and again (or shares one dict
  // among many events through the memo) must not make every lookup scan every setting. Keys that compare
  // as Python compares them (str, bytes, int and bool, float, None) are merged as they are set; a dict of
  // more than `indexed_from` pairs gets an index from a key's hash to its pairs.
  static constexpr std::size_t indexed_from = 16;
  using DictIndex = std::unordered_multimap<std::uint64_t, std::uint32_t>;  // key hash -> pair number

  std::optional<std::uint64_t> key_hash(PickleRef key) const;  // none for keys never merged (tuples, ...)
  bool same_key(PickleRef a, PickleRef b) const;
  // Sets dict[key] = value in the dict whose items are containers_[container].
  void set_item(std::uint32_t container, PickleRef key, PickleRef value);

  std::vector<Node> nodes_;
  std::vector<std::string> strings_;
  std::vector<std::vector<PickleRef>> containers_;
  std::unordered_map<std::uint32_t, DictIndex> dict_indexes_;  // by container, for the large dicts
  PickleRef root_ = 0;
};

// Runs the pickle in `bytes` to its STOP. Errors (Errc::invalid_argument) name `source` and the byte offset
// of the offending opcode: truncation, unknown or refused opcodes, stack and memo misuse, data after STOP.
Result<PickleTree> parse_pickle(std::string_view bytes, std::string_view source);

// The error parse_pickle gives when the first opcode of `bytes` is one this machine does not run (unknown or
// refused), without reading further: enough to refuse data that is no pickle from its first byte.
std::optional<Error> check_pickle_start(std::string_view bytes, std::string_view source);

}  // namespace tessera::trace_detail
