// A small pickle encoder: plain data (None, booleans, integers, floats, strings, lists, dicts, small
// tuples) in pickle protocol 4, with only the opcodes PyTorch's memory viewer (MemoryViz.js) reads.
//
// Protocol 4 because it is what torch.cuda.memory._dump_snapshot writes (pickle's default protocol since
// Python 3.8), so the viewer reads our files down the same path as real snapshots; MemoryViz refuses 5.
// The output decodes in Python's pickle, in MemoryViz and in Tessera's own reader (pickle_reader.hpp):
//   - framing as Python does it: FRAME before every ~64 KiB of opcodes, never splitting one;
//   - the memo only through MEMOIZE (never BINPUT), because MemoryViz numbers MEMOIZE entries with its own
//     counter that BINPUT does not advance;
//   - lists and dicts filled in batches of 1000 (as Python does), because MemoryViz spreads a whole APPENDS
//     batch into one JavaScript call, which overflows the call stack on very long batches.
// Opcodes it can emit: PROTO FRAME STOP MARK EMPTY_DICT EMPTY_LIST EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3
// SETITEMS APPENDS BININT BININT1 BININT2 LONG1 BINFLOAT NONE NEWTRUE NEWFALSE SHORT_BINUNICODE BINUNICODE
// MEMOIZE BINGET LONG_BINGET.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::trace_detail {

class PickleWriter {
 public:
  PickleWriter();  // writes PROTO 4

  // Each call below writes one value: into the innermost open list, dict or tuple, or as the pickle's root.
  // A dict takes its items as key, value, key, value, ...
  void none();
  void boolean(bool value);
  void integer(std::int64_t value);
  void unsigned_integer(std::uint64_t value);  // beyond int64 too (LONG1)
  void real(double value);
  void string(std::string_view utf8);
  // The same string, memoized: the first time written and stored, later fetched (2 or 5 bytes). For dict
  // keys and other strings that repeat, as Python's pickler shares interned strings.
  void memo_string(std::string_view utf8);

  void begin_list();
  void end_list();
  void begin_dict();
  void end_dict();
  // A tuple of `count` values, which follow: TUPLE1-3 for up to three, MARK ... TUPLE beyond.
  void begin_tuple(std::size_t count);
  void end_tuple();

  // Writes STOP and returns the pickle. The writer must hold exactly one root value and no open container;
  // it is empty afterwards.
  std::string finish();

 private:
  enum class Kind : std::uint8_t { list, dict, tuple };
  struct Open {
    Kind kind;
    std::size_t batch = 0;     // values written since the last MARK (lists and dicts)
    std::size_t expected = 0;  // tuples: values announced
    std::size_t written = 0;   // tuples: values written
  };

  void before_value();               // the MARK that opens a list's or dict's batch
  void after_value();                // counts the value; closes a full batch
  void text(std::string_view utf8);  // SHORT_BINUNICODE or BINUNICODE, no bookkeeping
  void op(unsigned char opcode) { frame_.push_back(static_cast<char>(opcode)); }
  void little_endian(std::uint64_t value, std::size_t width);
  void commit_frame(bool force);

  std::string out_;    // PROTO and the frames committed so far
  std::string frame_;  // the frame being filled
  std::vector<Open> open_;
  // Looked up by string_view without a copy: a snapshot fetches its keys millions of times.
  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const noexcept { return std::hash<std::string_view>{}(text); }
  };
  std::unordered_map<std::string, std::uint32_t, TextHash, std::equal_to<>> memo_;
  std::size_t roots_ = 0;
};

}  // namespace tessera::trace_detail
