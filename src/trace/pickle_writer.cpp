// The encoder follows Lib/pickle.py's _Pickler for protocol 4 where the bytes matter to a reader: the
// integer opcodes by range, LONG1's minimal two's complement, the framer's sizes, the batch size.
#include "trace/pickle_writer.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <limits>

namespace tessera::trace_detail {

namespace {

// Opcodes (Lib/pickletools.py names).
constexpr unsigned char PROTO = 0x80;
constexpr unsigned char FRAME = 0x95;
constexpr unsigned char STOP = '.';
constexpr unsigned char MARK = '(';
constexpr unsigned char EMPTY_DICT = '}';
constexpr unsigned char EMPTY_LIST = ']';
constexpr unsigned char EMPTY_TUPLE = ')';
constexpr unsigned char TUPLE = 't';
constexpr unsigned char TUPLE1 = 0x85;
constexpr unsigned char TUPLE2 = 0x86;
constexpr unsigned char TUPLE3 = 0x87;
constexpr unsigned char SETITEMS = 'u';
constexpr unsigned char APPENDS = 'e';
constexpr unsigned char BININT = 'J';
constexpr unsigned char BININT1 = 'K';
constexpr unsigned char BININT2 = 'M';
constexpr unsigned char LONG1 = 0x8a;
constexpr unsigned char BINFLOAT = 'G';
constexpr unsigned char NONE = 'N';
constexpr unsigned char NEWTRUE = 0x88;
constexpr unsigned char NEWFALSE = 0x89;
constexpr unsigned char SHORT_BINUNICODE = 0x8c;
constexpr unsigned char BINUNICODE = 'X';
constexpr unsigned char MEMOIZE = 0x94;
constexpr unsigned char BINGET = 'h';
constexpr unsigned char LONG_BINGET = 'j';

constexpr std::size_t frame_target = 64 * 1024;  // pickle.py's _FRAME_SIZE_TARGET
constexpr std::size_t frame_min = 4;             // smaller frames go out without a FRAME header
constexpr std::size_t batch_size = 1000;         // pickle.py's _BATCHSIZE

}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(static_cast<char>(PROTO));
  out_.push_back(4);
}

void PickleWriter::little_endian(std::uint64_t value, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) frame_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void PickleWriter::commit_frame(bool force) {
  if (frame_.empty() || (!force && frame_.size() < frame_target)) return;
  if (frame_.size() >= frame_min) {
    out_.push_back(static_cast<char>(FRAME));
    const std::uint64_t length = frame_.size();
    for (std::size_t i = 0; i < 8; ++i) out_.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  }
  out_ += frame_;
  frame_.clear();
}

void PickleWriter::before_value() {
  // Called at an opcode boundary, so a frame ends between two values, never inside an opcode.
  commit_frame(false);
  if (open_.empty()) {
    assert(roots_ == 0 && "a pickle holds one root value");
    return;
  }
  Open& top = open_.back();
  if (top.kind != Kind::tuple && top.batch == 0) op(MARK);
}

void PickleWriter::after_value() {
  if (open_.empty()) {
    ++roots_;
    return;
  }
  Open& top = open_.back();
  if (top.kind == Kind::tuple) {
    ++top.written;
    assert(top.written <= top.expected);
    return;
  }
  ++top.batch;
  const std::size_t full = top.kind == Kind::dict ? 2 * batch_size : batch_size;
  if (top.batch == full) {
    op(top.kind == Kind::dict ? SETITEMS : APPENDS);
    top.batch = 0;
  }
}

void PickleWriter::none() {
  before_value();
  op(NONE);
  after_value();
}

void PickleWriter::boolean(bool value) {
  before_value();
  op(value ? NEWTRUE : NEWFALSE);
  after_value();
}

void PickleWriter::integer(std::int64_t value) {
  if (value >= 0) {
    unsigned_integer(static_cast<std::uint64_t>(value));
    return;
  }
  before_value();
  if (value >= std::numeric_limits<std::int32_t>::min()) {
    op(BININT);
    little_endian(static_cast<std::uint32_t>(static_cast<std::int32_t>(value)), 4);
  } else {
    // Minimal two's complement: drop 0xff bytes while the byte below still carries the sign.
    const auto bits = static_cast<std::uint64_t>(value);
    std::size_t length = 8;
    while (length > 1 && ((bits >> (8 * (length - 1))) & 0xff) == 0xff && ((bits >> (8 * (length - 2))) & 0x80) != 0) {
      --length;
    }
    op(LONG1);
    frame_.push_back(static_cast<char>(length));
    little_endian(bits, length);
  }
  after_value();
}

void PickleWriter::unsigned_integer(std::uint64_t value) {
  before_value();
  if (value < 0x100) {
    op(BININT1);
    little_endian(value, 1);
  } else if (value < 0x10000) {
    op(BININT2);
    little_endian(value, 2);
  } else if (value <= static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
    op(BININT);
    little_endian(value, 4);
  } else {
    // As many bytes as the bits need, plus one when the top bit is set so that it does not read as a sign.
    const auto bits = static_cast<std::size_t>(std::bit_width(value));
    const std::size_t length = bits / 8 + 1;
    op(LONG1);
    frame_.push_back(static_cast<char>(length));
    little_endian(value, std::min<std::size_t>(length, 8));
    if (length > 8) frame_.push_back(0);
  }
  after_value();
}

void PickleWriter::real(double value) {
  before_value();
  op(BINFLOAT);
  const auto bits = std::bit_cast<std::uint64_t>(value);
  for (int shift = 56; shift >= 0; shift -= 8) frame_.push_back(static_cast<char>((bits >> shift) & 0xff));
  after_value();
}

void PickleWriter::text(std::string_view utf8) {
  if (utf8.size() < 0x100) {
    op(SHORT_BINUNICODE);
    little_endian(utf8.size(), 1);
  } else {
    // BINUNICODE8 is not among the opcodes MemoryViz reads, so 4 GiB is the limit.
    assert(utf8.size() <= std::numeric_limits<std::uint32_t>::max());
    op(BINUNICODE);
    little_endian(utf8.size(), 4);
  }
  frame_ += utf8;
}

void PickleWriter::string(std::string_view utf8) {
  before_value();
  text(utf8);
  after_value();
}

void PickleWriter::memo_string(std::string_view utf8) {
  const auto found = memo_.find(utf8);
  before_value();
  if (found == memo_.end()) {
    text(utf8);
    op(MEMOIZE);  // stores at index len(memo), which is memo_.size() since only this writes the memo
    memo_.emplace(std::string(utf8), static_cast<std::uint32_t>(memo_.size()));
  } else if (found->second < 0x100) {
    op(BINGET);
    little_endian(found->second, 1);
  } else {
    op(LONG_BINGET);
    little_endian(found->second, 4);
  }
  after_value();
}

void PickleWriter::begin_list() {
  before_value();
  op(EMPTY_LIST);
  open_.push_back(Open{Kind::list});
}

void PickleWriter::begin_dict() {
  before_value();
  op(EMPTY_DICT);
  open_.push_back(Open{Kind::dict});
}

void PickleWriter::end_list() {
  assert(!open_.empty() && open_.back().kind == Kind::list);
  if (open_.back().batch > 0) op(APPENDS);
  open_.pop_back();
  after_value();
}

void PickleWriter::end_dict() {
  assert(!open_.empty() && open_.back().kind == Kind::dict);
  assert(open_.back().batch % 2 == 0 && "a dict takes key, value pairs");
  if (open_.back().batch > 0) op(SETITEMS);
  open_.pop_back();
  after_value();
}

void PickleWriter::begin_tuple(std::size_t count) {
  before_value();
  if (count > 3) op(MARK);
  open_.push_back(Open{Kind::tuple, 0, count, 0});
}

void PickleWriter::end_tuple() {
  assert(!open_.empty() && open_.back().kind == Kind::tuple);
  const Open tuple = open_.back();
  assert(tuple.written == tuple.expected);
  static constexpr unsigned char by_count[] = {EMPTY_TUPLE, TUPLE1, TUPLE2, TUPLE3};
  op(tuple.expected <= 3 ? by_count[tuple.expected] : TUPLE);
  open_.pop_back();
  after_value();
}

std::string PickleWriter::finish() {
  assert(open_.empty() && roots_ == 1);
  op(STOP);
  commit_frame(true);
  std::string pickle = std::move(out_);
  *this = PickleWriter();
  return pickle;
}

}  // namespace tessera::trace_detail
