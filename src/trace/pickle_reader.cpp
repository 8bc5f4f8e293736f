// The pickle machine: one pass over the opcodes with Python's stack, mark stack and memo (Lib/pickle.py's
// _Unpickler is the reference for what each opcode does). Only opcodes that build plain data are run.
#include "trace/pickle_reader.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace tessera::trace_detail {

std::string_view to_string(PickleKind kind) noexcept {
  switch (kind) {
    case PickleKind::none: return "None";
    case PickleKind::boolean: return "bool";
    case PickleKind::integer: return "int";
    case PickleKind::big_integer: return "big int";
    case PickleKind::real: return "float";
    case PickleKind::string: return "str";
    case PickleKind::bytes: return "bytes";
    case PickleKind::list: return "list";
    case PickleKind::tuple: return "tuple";
    case PickleKind::dict: return "dict";
    case PickleKind::set: return "set";
  }
  return "unknown";
}

std::optional<std::int64_t> PickleTree::integer(PickleRef value) const {
  const Node& node = nodes_[value];
  if (node.kind == PickleKind::integer || node.kind == PickleKind::boolean) return node.number;
  return std::nullopt;
}

std::optional<double> PickleTree::real(PickleRef value) const {
  const Node& node = nodes_[value];
  if (node.kind == PickleKind::real) return std::bit_cast<double>(node.number);
  if (node.kind == PickleKind::integer) return static_cast<double>(node.number);
  return std::nullopt;
}

std::optional<bool> PickleTree::boolean(PickleRef value) const {
  const Node& node = nodes_[value];
  if (node.kind == PickleKind::boolean) return node.number != 0;
  return std::nullopt;
}

std::optional<std::string_view> PickleTree::string(PickleRef value) const {
  const Node& node = nodes_[value];
  if (node.kind == PickleKind::string || node.kind == PickleKind::bytes) return std::string_view(strings_[node.payload]);
  return std::nullopt;
}

std::span<const PickleRef> PickleTree::items(PickleRef value) const {
  const Node& node = nodes_[value];
  switch (node.kind) {
    case PickleKind::list:
    case PickleKind::tuple:
    case PickleKind::dict:
    case PickleKind::set: return containers_[node.payload];
    default: return {};
  }
}

std::size_t PickleTree::size(PickleRef value) const {
  const std::size_t count = items(value).size();
  return kind(value) == PickleKind::dict ? count / 2 : count;
}

namespace {

// Dict keys are hashed by what Python compares: the class (str, bytes, number, None) and the value, with
// an int, a bool and an integral float of one value alike (1 == True == 1.0 in Python).
enum class KeyClass : std::uint64_t { text = 1, bytes = 2, number = 3, real = 4, none = 5 };

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t key_class_hash(KeyClass key_class, std::uint64_t value) {
  return mix(value ^ (static_cast<std::uint64_t>(key_class) << 56));
}

std::uint64_t text_hash(KeyClass key_class, std::string_view text) {
  return key_class_hash(key_class, std::hash<std::string_view>{}(text));
}

// A float that equals an int64 is that int as a key.
std::optional<std::int64_t> integral(double value) {
  if (!(value >= -0x1p63 && value < 0x1p63) || std::trunc(value) != value) return std::nullopt;
  return static_cast<std::int64_t>(value);
}

}  // namespace

std::optional<std::uint64_t> PickleTree::key_hash(PickleRef key) const {
  const Node& node = nodes_[key];
  switch (node.kind) {
    case PickleKind::string: return text_hash(KeyClass::text, strings_[node.payload]);
    case PickleKind::bytes: return text_hash(KeyClass::bytes, strings_[node.payload]);
    case PickleKind::integer:
    case PickleKind::boolean: return key_class_hash(KeyClass::number, static_cast<std::uint64_t>(node.number));
    case PickleKind::real: {
      const double value = std::bit_cast<double>(node.number);
      if (const auto whole = integral(value)) {
        return key_class_hash(KeyClass::number, static_cast<std::uint64_t>(*whole));
      }
      if (std::isnan(value)) return std::nullopt;  // NaN equals nothing, itself included
      return key_class_hash(KeyClass::real, static_cast<std::uint64_t>(node.number));
    }
    case PickleKind::none: return key_class_hash(KeyClass::none, 0);
    default: return std::nullopt;  // big ints and containers: kept as set, never merged
  }
}

bool PickleTree::same_key(PickleRef a, PickleRef b) const {
  const Node& x = nodes_[a];
  const Node& y = nodes_[b];
  if (x.kind == PickleKind::string || x.kind == PickleKind::bytes) {
    return y.kind == x.kind && strings_[x.payload] == strings_[y.payload];
  }
  if (x.kind == PickleKind::none) return y.kind == PickleKind::none;
  auto whole = [](const Node& node) -> std::optional<std::int64_t> {
    if (node.kind == PickleKind::integer || node.kind == PickleKind::boolean) return node.number;
    if (node.kind == PickleKind::real) return integral(std::bit_cast<double>(node.number));
    return std::nullopt;
  };
  if (const auto number = whole(x)) return whole(y) == number;
  if (x.kind == PickleKind::real && y.kind == PickleKind::real) {
    return std::bit_cast<double>(x.number) == std::bit_cast<double>(y.number);
  }
  return false;
}

void PickleTree::set_item(std::uint32_t container, PickleRef key, PickleRef value) {
  std::vector<PickleRef>& items = containers_[container];
  const std::optional<std::uint64_t> hash = key_hash(key);
  const auto indexed = dict_indexes_.find(container);
  if (hash) {  // a key set before keeps its place and takes the new value, as in Python
    if (indexed != dict_indexes_.end()) {
      const auto [begin, end] = indexed->second.equal_range(*hash);
      for (auto it = begin; it != end; ++it) {
        if (same_key(items[2 * it->second], key)) {
          items[2 * it->second + 1] = value;
          return;
        }
      }
    } else {
      for (std::size_t i = 0; i < items.size(); i += 2) {
        if (same_key(items[i], key)) {
          items[i + 1] = value;
          return;
        }
      }
    }
  }
  items.push_back(key);
  items.push_back(value);
  const std::size_t pairs = items.size() / 2;
  if (indexed != dict_indexes_.end()) {
    if (hash) indexed->second.emplace(*hash, static_cast<std::uint32_t>(pairs - 1));
  } else if (pairs > indexed_from) {
    DictIndex& index = dict_indexes_[container];
    for (std::size_t pair = 0; pair < pairs; ++pair) {
      if (const auto pair_hash = key_hash(items[2 * pair])) index.emplace(*pair_hash, static_cast<std::uint32_t>(pair));
    }
  }
}

std::optional<PickleRef> PickleTree::find(PickleRef dict, std::string_view key) const {
  if (kind(dict) != PickleKind::dict) return std::nullopt;
  const std::uint32_t container = nodes_[dict].payload;
  const std::vector<PickleRef>& pairs = containers_[container];
  auto holds = [&](std::size_t i) {
    const Node& node = nodes_[pairs[i]];
    return node.kind == PickleKind::string && strings_[node.payload] == key;
  };
  // Keys are merged as they are set, so the first match is the only one.
  const auto indexed = dict_indexes_.find(container);
  if (indexed == dict_indexes_.end()) {
    for (std::size_t i = 0; i < pairs.size(); i += 2) {
      if (holds(i)) return pairs[i + 1];
    }
    return std::nullopt;
  }
  const auto [begin, end] = indexed->second.equal_range(text_hash(KeyClass::text, key));
  for (auto it = begin; it != end; ++it) {
    if (holds(2 * std::size_t{it->second})) return pairs[2 * std::size_t{it->second} + 1];
  }
  return std::nullopt;
}

namespace {

// Opcodes this machine refuses, by name, so that the error says what the file holds.
std::string_view refused_opcode_name(unsigned char op) {
  switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'g': return "GET";
    case 'p': return "PUT";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return {};
  }
}

}  // namespace

class PickleMachine {
 public:
  PickleMachine(std::string_view bytes, std::string_view source) : data_(bytes), source_(source) {}

  // Runs the first opcode only, and keeps its error if the machine does not run that opcode.
  std::optional<Error> first_opcode_refusal() {
    if (data_.empty()) return {};
    position_ = 1;
    std::optional<Error> error = step(static_cast<unsigned char>(data_[0]));
    if (!refused_) return {};
    return error;
  }

  Result<PickleTree> run() {
    while (true) {
      op_offset_ = position_;
      if (position_ >= data_.size()) return fail("the pickle ends without STOP (truncated file)");
      const auto op = static_cast<unsigned char>(data_[position_++]);
      std::optional<Error> error = step(op);
      if (error) return std::move(*error);
      if (stopped_) break;
    }
    if (position_ != data_.size()) {
      op_offset_ = position_;
      return fail(fmt::format("{} bytes after STOP", data_.size() - position_));
    }
    return std::move(tree_);
  }

 private:
  using Node = PickleTree::Node;
  static constexpr PickleRef unset = std::numeric_limits<PickleRef>::max();

  // Each opcode returns nothing on success and the error otherwise.
  std::optional<Error> step(unsigned char op) {
    switch (op) {
      case 0x80: {  // PROTO
        std::uint64_t version = 0;
        if (!read_unsigned(1, version)) return truncated("PROTO");
        if (version > 5) return fail(fmt::format("pickle protocol {} is newer than 5", version));
        return {};
      }
      case 0x95: {  // FRAME: a length prefix; the opcodes inside are read as usual
        std::uint64_t length = 0;
        if (!read_unsigned(8, length)) return truncated("FRAME");
        if (length > data_.size() - position_) {
          return fail(fmt::format("FRAME of {} bytes runs past the end of the data (truncated file)", length));
        }
        return {};
      }
      case '.':  // STOP
        if (above_mark() == 0) {
          return fail(stack_.empty() ? "STOP with an empty stack" : "STOP with nothing above the mark");
        }
        tree_.root_ = stack_.back();
        stopped_ = true;
        return {};
      case '(':  // MARK
        marks_.push_back(stack_.size());
        return {};
      case '0':  // POP: as Python's, a POP right at the top mark pops the mark
        if (!marks_.empty() && marks_.back() == stack_.size()) {
          marks_.pop_back();
          return {};
        }
        if (above_mark() == 0) return fail("POP with an empty stack");
        stack_.pop_back();
        return {};
      case '1': {  // POP_MARK
        std::size_t mark = 0;
        if (auto error = pop_mark(mark)) return error;
        stack_.resize(mark);
        return {};
      }
      case '2':  // DUP
        if (above_mark() == 0) return fail("DUP with an empty stack");
        stack_.push_back(stack_.back());
        return {};
      case '}': return push_container(PickleKind::dict, {});  // EMPTY_DICT
      case ']': return push_container(PickleKind::list, {});  // EMPTY_LIST
      case ')': return push_container(PickleKind::tuple, {});  // EMPTY_TUPLE
      case 0x8f: return push_container(PickleKind::set, {});  // EMPTY_SET
      case 'd': return collect(PickleKind::dict);             // DICT
      case 'l': return collect(PickleKind::list);             // LIST
      case 't': return collect(PickleKind::tuple);            // TUPLE
      case 0x91: return collect(PickleKind::set);             // FROZENSET
      case 0x85: return tuple_of(1);                          // TUPLE1
      case 0x86: return tuple_of(2);                          // TUPLE2
      case 0x87: return tuple_of(3);                          // TUPLE3
      case 's': {                                             // SETITEM
        if (above_mark() < 3) return fail("SETITEM needs a dict, a key and a value above the mark");
        const PickleRef value = stack_.back();
        const PickleRef key = stack_[stack_.size() - 2];
        stack_.resize(stack_.size() - 2);
        return add_items(PickleKind::dict, stack_.back(), {key, value}, "SETITEM");
      }
      case 'u': {  // SETITEMS
        std::size_t mark = 0;
        if (auto error = pop_mark(mark)) return error;
        if ((stack_.size() - mark) % 2 != 0) return fail("SETITEMS with an odd number of items");
        return add_marked_items(PickleKind::dict, mark, "SETITEMS");
      }
      case 'a': {  // APPEND
        if (above_mark() < 2) return fail("APPEND needs a list and a value above the mark");
        const PickleRef value = stack_.back();
        stack_.pop_back();
        return add_items(PickleKind::list, stack_.back(), {value}, "APPEND");
      }
      case 'e': {  // APPENDS
        std::size_t mark = 0;
        if (auto error = pop_mark(mark)) return error;
        return add_marked_items(PickleKind::list, mark, "APPENDS");
      }
      case 0x90: {  // ADDITEMS
        std::size_t mark = 0;
        if (auto error = pop_mark(mark)) return error;
        return add_marked_items(PickleKind::set, mark, "ADDITEMS");
      }
      case 'J': return push_signed(4, "BININT");
      case 'K': return push_unsigned(1, "BININT1");
      case 'M': return push_unsigned(2, "BININT2");
      case 0x8a: {  // LONG1
        std::uint64_t length = 0;
        if (!read_unsigned(1, length)) return truncated("LONG1");
        return push_long(length, "LONG1");
      }
      case 0x8b: {  // LONG4: the length is a signed 4-byte integer
        std::uint64_t raw = 0;
        if (!read_unsigned(4, raw)) return truncated("LONG4");
        const auto length = static_cast<std::int32_t>(static_cast<std::uint32_t>(raw));
        if (length < 0) return fail("LONG4 with a negative length");
        return push_long(static_cast<std::uint64_t>(length), "LONG4");
      }
      case 'G': {  // BINFLOAT: big-endian IEEE 754 double
        if (data_.size() - position_ < 8) return truncated("BINFLOAT");
        std::uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(data_[position_++]);
        return push(Node{PickleKind::real, 0, static_cast<std::int64_t>(bits)});
      }
      case 'N': return push(Node{PickleKind::none, 0, 0});     // NONE
      case 0x88: return push(Node{PickleKind::boolean, 0, 1});  // NEWTRUE
      case 0x89: return push(Node{PickleKind::boolean, 0, 0});  // NEWFALSE
      case 0x8c: return push_text(1, PickleKind::string, "SHORT_BINUNICODE");
      case 'X': return push_text(4, PickleKind::string, "BINUNICODE");
      case 0x8d: return push_text(8, PickleKind::string, "BINUNICODE8");
      case 'C': return push_text(1, PickleKind::bytes, "SHORT_BINBYTES");
      case 'B': return push_text(4, PickleKind::bytes, "BINBYTES");
      case 0x8e: return push_text(8, PickleKind::bytes, "BINBYTES8");
      case 'q': return put(1, "BINPUT");
      case 'r': return put(4, "LONG_BINPUT");
      case 0x94:  // MEMOIZE: stores at index len(memo)
        if (above_mark() == 0) return fail("MEMOIZE with an empty stack");
        return store(memo_count_, "MEMOIZE");
      case 'h': return get(1, "BINGET");
      case 'j': return get(4, "LONG_BINGET");
      default: break;
    }
    refused_ = true;
    const std::string_view name = refused_opcode_name(op);
    if (!name.empty()) {
      return fail(fmt::format("unsupported pickle opcode {} (0x{:02x}): only plain data is read", name, op));
    }
    return fail(fmt::format("unknown pickle opcode 0x{:02x}", op));
  }

  Error fail(std::string what) const {
    return make_error(Errc::invalid_argument, fmt::format("{}: byte {}: {}", source_, op_offset_, what));
  }

  Error truncated(std::string_view opcode) const {
    return fail(fmt::format("{} runs past the end of the data (truncated file)", opcode));
  }

  bool read_unsigned(std::size_t width, std::uint64_t& value) {
    if (data_.size() - position_ < width) return false;
    value = 0;
    for (std::size_t i = 0; i < width; ++i) {
      value |= std::uint64_t{static_cast<unsigned char>(data_[position_ + i])} << (8 * i);
    }
    position_ += width;
    return true;
  }

  std::optional<Error> push(Node node) {
    if (tree_.nodes_.size() >= unset) return fail("too many values");
    stack_.push_back(static_cast<PickleRef>(tree_.nodes_.size()));
    tree_.nodes_.push_back(node);
    return {};
  }

  std::optional<Error> push_container(PickleKind kind, std::vector<PickleRef> items) {
    const auto index = static_cast<std::uint32_t>(tree_.containers_.size());
    tree_.containers_.push_back(std::move(items));
    return push(Node{kind, index, 0});
  }

  // As in Python's unpickler, a MARK fences off the stack below it: the opcodes that take values from the
  // stack see only those above the top mark, so that no mark ever points past the top of the stack.
  std::size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  std::size_t above_mark() const { return stack_.size() - fence(); }

  std::optional<Error> pop_mark(std::size_t& mark) {
    if (marks_.empty()) return fail("no MARK to pop to");
    mark = marks_.back();
    marks_.pop_back();
    return {};
  }

  // DICT, LIST, TUPLE, FROZENSET: a new container of the items since the last mark.
  std::optional<Error> collect(PickleKind kind) {
    std::size_t mark = 0;
    if (auto error = pop_mark(mark)) return error;
    if (kind == PickleKind::dict && (stack_.size() - mark) % 2 != 0) return fail("DICT with an odd number of items");
    std::vector<PickleRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    if (kind != PickleKind::dict) return push_container(kind, std::move(items));
    if (auto error = push_container(kind, {})) return error;
    const std::uint32_t container = tree_.nodes_[stack_.back()].payload;
    for (std::size_t i = 0; i < items.size(); i += 2) tree_.set_item(container, items[i], items[i + 1]);
    return {};
  }

  std::optional<Error> tuple_of(std::size_t count) {
    if (above_mark() < count) return fail(fmt::format("TUPLE{} with {} values above the mark", count, above_mark()));
    std::vector<PickleRef> items(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
    stack_.resize(stack_.size() - count);
    return push_container(PickleKind::tuple, std::move(items));
  }

  std::optional<Error> add_items(PickleKind kind, PickleRef target, std::initializer_list<PickleRef> items,
                                 std::string_view opcode) {
    const Node& node = tree_.nodes_[target];
    if (node.kind != kind) {
      return fail(fmt::format("{} on a {}, not a {}", opcode, to_string(node.kind), to_string(kind)));
    }
    if (kind == PickleKind::dict) {
      tree_.set_item(node.payload, *items.begin(), *(items.begin() + 1));
      return {};
    }
    auto& container = tree_.containers_[node.payload];
    container.insert(container.end(), items.begin(), items.end());
    return {};
  }

  // SETITEMS, APPENDS, ADDITEMS: the items since the mark go into the container just below it.
  std::optional<Error> add_marked_items(PickleKind kind, std::size_t mark, std::string_view opcode) {
    if (mark <= fence()) return fail(fmt::format("{} with nothing below the mark", opcode));
    const Node& node = tree_.nodes_[stack_[mark - 1]];
    if (node.kind != kind) {
      return fail(fmt::format("{} on a {}, not a {}", opcode, to_string(node.kind), to_string(kind)));
    }
    if (kind == PickleKind::dict) {
      for (std::size_t i = mark; i < stack_.size(); i += 2) tree_.set_item(node.payload, stack_[i], stack_[i + 1]);
    } else {
      auto& container = tree_.containers_[node.payload];
      container.insert(container.end(), stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    }
    stack_.resize(mark);
    return {};
  }

  std::optional<Error> push_unsigned(std::size_t width, std::string_view opcode) {
    std::uint64_t value = 0;
    if (!read_unsigned(width, value)) return truncated(opcode);
    return push(Node{PickleKind::integer, 0, static_cast<std::int64_t>(value)});
  }

  std::optional<Error> push_signed(std::size_t width, std::string_view opcode) {
    std::uint64_t value = 0;
    if (!read_unsigned(width, value)) return truncated(opcode);
    return push(Node{PickleKind::integer, 0, static_cast<std::int32_t>(static_cast<std::uint32_t>(value))});
  }

  // LONG1/LONG4: little-endian two's complement of any length.
  std::optional<Error> push_long(std::uint64_t length, std::string_view opcode) {
    if (length > data_.size() - position_) return truncated(opcode);
    const auto* bytes = reinterpret_cast<const unsigned char*>(data_.data() + position_);
    position_ += length;
    if (length == 0) return push(Node{PickleKind::integer, 0, 0});
    const bool negative = (bytes[length - 1] & 0x80) != 0;
    // Bytes beyond the eighth must only extend the sign for the value to fit in 64 bits.
    bool fits = true;
    for (std::size_t i = 8; i < length; ++i) fits = fits && bytes[i] == (negative ? 0xff : 0x00);
    if (length > 8) fits = fits && ((bytes[7] & 0x80) != 0) == negative;
    if (!fits) return push(Node{PickleKind::big_integer, 0, 0});
    std::uint64_t value = negative ? ~std::uint64_t{0} : 0;
    for (std::size_t i = 0; i < std::min<std::uint64_t>(length, 8); ++i) {
      value &= ~(std::uint64_t{0xff} << (8 * i));
      value |= std::uint64_t{bytes[i]} << (8 * i);
    }
    return push(Node{PickleKind::integer, 0, static_cast<std::int64_t>(value)});
  }

  std::optional<Error> push_text(std::size_t width, PickleKind kind, std::string_view opcode) {
    std::uint64_t length = 0;
    if (!read_unsigned(width, length)) return truncated(opcode);
    if (length > data_.size() - position_) {
      return fail(fmt::format("{} of {} bytes runs past the end of the data (truncated file)", opcode, length));
    }
    const auto index = static_cast<std::uint32_t>(tree_.strings_.size());
    tree_.strings_.emplace_back(data_.substr(position_, length));
    position_ += length;
    return push(Node{kind, index, 0});
  }

  std::optional<Error> put(std::size_t width, std::string_view opcode) {
    std::uint64_t index = 0;
    if (!read_unsigned(width, index)) return truncated(opcode);
    if (above_mark() == 0) return fail(fmt::format("{} with an empty stack", opcode));
    return store(index, opcode);
  }

  std::optional<Error> store(std::uint64_t index, std::string_view opcode) {
    // A pickler numbers its memo densely, so an index beyond the number of bytes is corruption, and
    // refusing it keeps a corrupt index from allocating gigabytes.
    if (index > data_.size()) return fail(fmt::format("{} to memo index {} out of range", opcode, index));
    if (index >= memo_.size()) memo_.resize(index + 1, unset);
    if (memo_[index] == unset) ++memo_count_;
    memo_[index] = stack_.back();
    return {};
  }

  std::optional<Error> get(std::size_t width, std::string_view opcode) {
    std::uint64_t index = 0;
    if (!read_unsigned(width, index)) return truncated(opcode);
    if (index >= memo_.size() || memo_[index] == unset) {
      return fail(fmt::format("{} of memo index {} that was never stored", opcode, index));
    }
    stack_.push_back(memo_[index]);
    return {};
  }

  std::string_view data_;
  std::string_view source_;
  std::size_t position_ = 0;
  std::size_t op_offset_ = 0;  // the opcode being run, for messages
  bool stopped_ = false;
  bool refused_ = false;  // the last opcode run is one this machine does not run
  PickleTree tree_;
  std::vector<PickleRef> stack_;
  std::vector<std::size_t> marks_;
  std::vector<PickleRef> memo_;
  std::size_t memo_count_ = 0;  // set entries of memo_: Python's len(memo)
};

Result<PickleTree> parse_pickle(std::string_view bytes, std::string_view source) {
  return PickleMachine(bytes, source).run();
}

std::optional<Error> check_pickle_start(std::string_view bytes, std::string_view source) {
  return PickleMachine(bytes, source).first_opcode_refusal();
}

}  // namespace tessera::trace_detail
