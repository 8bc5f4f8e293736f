// The pickle machine on pickles assembled here opcode by opcode: every opcode it runs, and the errors.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <optional>
#include <string>

#include "trace/pickle_reader.hpp"

namespace tessera::trace_detail {
namespace {

// Writes opcodes and their arguments exactly as Lib/pickle.py's Pickler would.
class Assembler {
 public:
  Assembler& op(unsigned char code) {
    bytes_.push_back(static_cast<char>(code));
    return *this;
  }
  Assembler& le(std::uint64_t value, int width) {
    for (int i = 0; i < width; ++i) bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
    return *this;
  }
  Assembler& raw(std::string_view text) {
    bytes_.append(text);
    return *this;
  }

  Assembler& proto(int version) { return op(0x80).le(static_cast<std::uint64_t>(version), 1); }
  Assembler& stop() { return op('.'); }
  Assembler& mark() { return op('('); }
  Assembler& short_unicode(std::string_view s) { return op(0x8c).le(s.size(), 1).raw(s); }
  Assembler& unicode(std::string_view s) { return op('X').le(s.size(), 4).raw(s); }
  Assembler& unicode8(std::string_view s) { return op(0x8d).le(s.size(), 8).raw(s); }
  Assembler& short_bytes(std::string_view s) { return op('C').le(s.size(), 1).raw(s); }
  Assembler& bytes(std::string_view s) { return op('B').le(s.size(), 4).raw(s); }
  Assembler& bytes8(std::string_view s) { return op(0x8e).le(s.size(), 8).raw(s); }
  Assembler& binint(std::int32_t v) { return op('J').le(static_cast<std::uint32_t>(v), 4); }
  Assembler& binint1(std::uint8_t v) { return op('K').le(v, 1); }
  Assembler& binint2(std::uint16_t v) { return op('M').le(v, 2); }
  // LONG1/LONG4 with an explicit little-endian two's complement body.
  Assembler& long1(std::string_view body) { return op(0x8a).le(body.size(), 1).raw(body); }
  Assembler& long4(std::string_view body) { return op(0x8b).le(body.size(), 4).raw(body); }
  Assembler& binfloat(double v) {
    op('G');
    const auto bits = std::bit_cast<std::uint64_t>(v);
    for (int i = 7; i >= 0; --i) bytes_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
    return *this;
  }
  Assembler& binput(std::uint8_t i) { return op('q').le(i, 1); }
  Assembler& long_binput(std::uint32_t i) { return op('r').le(i, 4); }
  Assembler& binget(std::uint8_t i) { return op('h').le(i, 1); }
  Assembler& long_binget(std::uint32_t i) { return op('j').le(i, 4); }

  const std::string& str() const { return bytes_; }
  std::size_t size() const { return bytes_.size(); }

 private:
  std::string bytes_;
};

std::string le_bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

// {"ints": [...], "misc": (...), "text": (...), "tuples": [...], "built": [...], "shared": [...],
//  "set": {1, 2}, "frozen": frozenset({3}), "single": [[5], {"s": 6}]} in protocol 4 with a FRAME,
// using every opcode the machine runs.
std::string every_opcode_pickle() {
  Assembler body;
  body.op('}').op(0x94);  // EMPTY_DICT, MEMOIZE -> memo 0
  body.mark();
  body.short_unicode("ints").op(']').binput(1);  // EMPTY_LIST, BINPUT 1
  body.mark()
      .binint1(255)
      .binint2(65535)
      .binint(-1)
      .binint(2147483647)
      .binint(-2147483647 - 1)
      .long1("")                                                      // 0
      .long1(le_bytes({0, 0, 0, 0, 0, 1}))                            // 2**40
      .long1(le_bytes({0, 0, 0, 0, 0, 0xff}))                         // -2**40
      .long1(le_bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}))  // 2**63-1
      .long4(le_bytes({0, 0, 0, 0, 0, 0, 0, 0x80}))                   // -2**63
      .long1(le_bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}))  // 2**64-1: beyond int64
      .long1(le_bytes({0x01, 0, 0, 0, 0, 0, 0, 0, 0}));               // 1 written in 9 bytes: fits
  body.op('e');                                                        // APPENDS
  body.short_unicode("misc").mark().binfloat(1.5).op('N').op(0x88).op(0x89).op('t').op(0x94);  // TUPLE, MEMOIZE -> 2
  body.short_unicode("text")
      .mark()
      .short_unicode("a")
      .unicode("bc")
      .unicode8("d\xc3\xa9" "f")
      .short_bytes("x")
      .bytes("yz")
      .bytes8("")
      .op('t')
      .long_binput(3);
  body.short_unicode("tuples").op(']').mark();
  body.op(')');                                     // EMPTY_TUPLE
  body.binint1(1).op(0x85);                         // TUPLE1
  body.binint1(1).binint1(2).op(0x86);              // TUPLE2
  body.binint1(1).binint1(2).binint1(3).op(0x87);   // TUPLE3
  body.op('e');
  body.short_unicode("built").mark();
  body.mark().binint1(7).binint1(8).op('l');                        // LIST
  body.mark().short_unicode("k").binint1(9).op('d');               // DICT
  body.op('l');
  body.short_unicode("shared").mark().binget(1).long_binget(3).binget(2).op('l');
  body.short_unicode("set").op(0x8f).mark().binint1(1).binint1(2).op(0x90);  // EMPTY_SET, ADDITEMS
  body.short_unicode("frozen").mark().binint1(3).op(0x91);                  // FROZENSET
  body.short_unicode("single").op(']');
  body.op(']').binint1(5).op('a').op('a');            // APPEND, APPEND: [[5]]
  body.op('}').short_unicode("s").binint1(6).op('s');  // SETITEM
  body.op('a');
  body.binint1(99).op('0');                           // POP
  body.mark().binint1(98).binint1(97).op('1');        // POP_MARK
  body.op('u');                                       // SETITEMS onto the root
  body.op('2').op('0');                               // DUP, POP: the root stays
  body.stop();

  Assembler whole;
  whole.proto(4).op(0x95).le(body.size(), 8).raw(body.str());  // FRAME
  return whole.str();
}

TEST(PickleReader, RunsEveryOpcodeOfPlainData) {
  const std::string bytes = every_opcode_pickle();
  Result<PickleTree> parsed = parse_pickle(bytes, "hand.pickle");
  ASSERT_TRUE(parsed.ok()) << describe(parsed.error());
  const PickleTree& tree = *parsed;
  const PickleRef root = tree.root();
  ASSERT_EQ(tree.kind(root), PickleKind::dict);
  EXPECT_EQ(tree.size(root), 9u);

  const PickleRef ints = *tree.find(root, "ints");
  ASSERT_EQ(tree.kind(ints), PickleKind::list);
  const auto items = tree.items(ints);
  ASSERT_EQ(items.size(), 12u);
  const std::int64_t expected[] = {255, 65535, -1, 2147483647, -2147483648LL, 0, std::int64_t{1} << 40,
                                   -(std::int64_t{1} << 40), INT64_MAX, INT64_MIN};
  for (std::size_t i = 0; i < std::size(expected); ++i) {
    EXPECT_EQ(tree.integer(items[i]), expected[i]) << "item " << i;
  }
  EXPECT_EQ(tree.kind(items[10]), PickleKind::big_integer);
  EXPECT_FALSE(tree.integer(items[10]).has_value());
  EXPECT_EQ(tree.integer(items[11]), 1);

  const PickleRef misc = *tree.find(root, "misc");
  ASSERT_EQ(tree.kind(misc), PickleKind::tuple);
  ASSERT_EQ(tree.size(misc), 4u);
  EXPECT_EQ(tree.real(tree.items(misc)[0]), 1.5);
  EXPECT_EQ(tree.kind(tree.items(misc)[1]), PickleKind::none);
  EXPECT_EQ(tree.boolean(tree.items(misc)[2]), true);
  EXPECT_EQ(tree.boolean(tree.items(misc)[3]), false);

  const PickleRef text = *tree.find(root, "text");
  ASSERT_EQ(tree.size(text), 6u);
  EXPECT_EQ(tree.string(tree.items(text)[0]), "a");
  EXPECT_EQ(tree.string(tree.items(text)[1]), "bc");
  EXPECT_EQ(tree.string(tree.items(text)[2]), "d\xc3\xa9" "f");
  EXPECT_EQ(tree.kind(tree.items(text)[3]), PickleKind::bytes);
  EXPECT_EQ(tree.string(tree.items(text)[3]), "x");
  EXPECT_EQ(tree.string(tree.items(text)[4]), "yz");
  EXPECT_EQ(tree.string(tree.items(text)[5]), "");

  const PickleRef tuples = *tree.find(root, "tuples");
  ASSERT_EQ(tree.size(tuples), 4u);
  for (std::size_t n = 0; n < 4; ++n) {
    const PickleRef tuple = tree.items(tuples)[n];
    ASSERT_EQ(tree.kind(tuple), PickleKind::tuple);
    ASSERT_EQ(tree.size(tuple), n);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(tree.integer(tree.items(tuple)[i]), static_cast<std::int64_t>(i + 1));
  }

  const PickleRef built = *tree.find(root, "built");
  ASSERT_EQ(tree.size(built), 2u);
  EXPECT_EQ(tree.kind(tree.items(built)[0]), PickleKind::list);
  EXPECT_EQ(tree.integer(tree.items(tree.items(built)[0])[1]), 8);
  EXPECT_EQ(tree.integer(*tree.find(tree.items(built)[1], "k")), 9);

  // Memo fetches are the same objects, not copies.
  const PickleRef shared = *tree.find(root, "shared");
  ASSERT_EQ(tree.size(shared), 3u);
  EXPECT_EQ(tree.items(shared)[0], ints);
  EXPECT_EQ(tree.items(shared)[1], text);
  EXPECT_EQ(tree.items(shared)[2], misc);

  const PickleRef set = *tree.find(root, "set");
  EXPECT_EQ(tree.kind(set), PickleKind::set);
  EXPECT_EQ(tree.size(set), 2u);
  const PickleRef frozen = *tree.find(root, "frozen");
  EXPECT_EQ(tree.kind(frozen), PickleKind::set);
  EXPECT_EQ(tree.integer(tree.items(frozen)[0]), 3);

  const PickleRef single = *tree.find(root, "single");
  ASSERT_EQ(tree.size(single), 2u);
  EXPECT_EQ(tree.integer(tree.items(tree.items(single)[0])[0]), 5);
  EXPECT_EQ(tree.integer(*tree.find(tree.items(single)[1], "s")), 6);
}

TEST(PickleReader, ProtocolTwoWithoutFrames) {
  Assembler p;
  p.proto(2).op('}').binput(0).short_unicode("a").binint1(1).op('s').stop();
  Result<PickleTree> parsed = parse_pickle(p.str(), "p2");
  ASSERT_TRUE(parsed.ok()) << describe(parsed.error());
  EXPECT_EQ(parsed->integer(*parsed->find(parsed->root(), "a")), 1);
}

TEST(PickleReader, TheLastValueOfARepeatedKeyWins) {
  Assembler p;
  p.proto(4).op('}').mark().short_unicode("k").binint1(1).short_unicode("k").binint1(2).op('u').stop();
  Result<PickleTree> parsed = parse_pickle(p.str(), "dup");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->integer(*parsed->find(parsed->root(), "k")), 2);
  EXPECT_FALSE(parsed->find(parsed->root(), "missing").has_value());
}

// As in Python, a dict holds one pair per key: setting a key again keeps its place and takes the new value,
// and keys that Python finds equal (1, True and 1.0) are one key. str and bytes are not.
TEST(PickleReader, ARepeatedKeyIsOnePairAsInPython) {
  Assembler p;
  p.proto(4).op('}').mark();
  p.short_unicode("a").binint1(1).short_unicode("b").binint1(2).short_unicode("a").binint1(3);  // SETITEMS
  p.binint1(1).short_unicode("one").op(0x88).short_unicode("true").binfloat(1.0).short_unicode("float");
  p.short_bytes("a").binint1(4).op('N').binint1(5).op('N').binint1(6).binfloat(0.5).binint1(7).binfloat(0.5).binint1(8);
  p.op('u').short_unicode("b").binint1(9).op('s');  // SETITEM
  p.stop();
  Result<PickleTree> parsed = parse_pickle(p.str(), "dup");
  ASSERT_TRUE(parsed.ok()) << describe(parsed.error());
  const PickleTree& tree = *parsed;
  const PickleRef root = tree.root();
  // {"a": 3, "b": 9, 1: "float", b"a": 4, None: 6, 0.5: 8}: pickle.loads gives these 6 pairs in this order.
  ASSERT_EQ(tree.size(root), 6u);
  const auto pairs = tree.items(root);
  EXPECT_EQ(tree.string(pairs[0]), "a");
  EXPECT_EQ(tree.integer(pairs[1]), 3);
  EXPECT_EQ(tree.string(pairs[2]), "b");
  EXPECT_EQ(tree.integer(pairs[3]), 9);
  EXPECT_EQ(tree.kind(pairs[4]), PickleKind::integer);  // the first key set stays, as Python keeps it
  EXPECT_EQ(tree.string(pairs[5]), "float");
  EXPECT_EQ(tree.kind(pairs[6]), PickleKind::bytes);
  EXPECT_EQ(tree.integer(pairs[7]), 4);
  EXPECT_EQ(tree.kind(pairs[8]), PickleKind::none);
  EXPECT_EQ(tree.integer(pairs[9]), 6);
  EXPECT_EQ(tree.real(pairs[10]), 0.5);
  EXPECT_EQ(tree.integer(pairs[11]), 8);
  EXPECT_EQ(tree.integer(*tree.find(root, "a")), 3);
  EXPECT_EQ(tree.integer(*tree.find(root, "b")), 9);
}

// A dict that the memo hands to many places, and whose key is set over and over, holds one pair: the
// cost of a lookup depends on neither (the reader scanned every setting of every key on each lookup).
TEST(PickleReader, ADictSetOverAndOverAndSharedStaysOnePairPerKey) {
  constexpr std::size_t repeats = 20000;
  Assembler p;
  p.proto(4).op(']').mark();
  p.op('}').mark().short_unicode("action").short_unicode("free_requested").short_unicode("pad");
  for (std::size_t i = 0; i + 1 < 2 * repeats; ++i) p.op('2');  // DUP: ("pad", "pad") set `repeats` times
  p.short_unicode("size").binint(512).short_unicode("size").binint(1 << 20).op('u');
  for (std::size_t i = 0; i + 1 < repeats; ++i) p.op('2');  // the same dict `repeats` times in the list
  p.op('e').stop();
  Result<PickleTree> parsed = parse_pickle(p.str(), "shared");
  ASSERT_TRUE(parsed.ok()) << describe(parsed.error());
  const PickleTree& tree = *parsed;
  const auto events = tree.items(tree.root());
  ASSERT_EQ(events.size(), repeats);
  EXPECT_EQ(events.front(), events.back());  // one dict, shared
  EXPECT_EQ(tree.size(events.front()), 3u);   // action, pad, size: as pickle.loads keeps it
  EXPECT_EQ(tree.integer(*tree.find(events.back(), "size")), 1 << 20);
  EXPECT_EQ(tree.string(*tree.find(events.back(), "action")), "free_requested");
}

// Large dicts are indexed: every key of many is found, set again in place, and a missing one is not found.
TEST(PickleReader, EveryKeyOfALargeDictIsFound) {
  constexpr int keys = 3000;
  Assembler p;
  p.proto(4).op('}').mark();
  for (int i = 0; i < keys; ++i) p.short_unicode("key" + std::to_string(i)).binint(i);
  p.op('u').mark();
  for (int i = 0; i < keys; i += 3) p.short_unicode("key" + std::to_string(i)).binint(-i);  // set again
  p.binint(7).binint(70).binfloat(7.0).binint(71);  // 7 and 7.0: one int key, beside the str keys
  p.op('u').stop();
  Result<PickleTree> parsed = parse_pickle(p.str(), "large");
  ASSERT_TRUE(parsed.ok()) << describe(parsed.error());
  const PickleTree& tree = *parsed;
  ASSERT_EQ(tree.size(tree.root()), std::size_t{keys} + 1);
  for (int i = 0; i < keys; ++i) {
    const std::optional<PickleRef> value = tree.find(tree.root(), "key" + std::to_string(i));
    ASSERT_TRUE(value.has_value()) << i;
    EXPECT_EQ(tree.integer(*value), i % 3 == 0 ? -i : i) << i;
  }
  EXPECT_EQ(tree.integer(tree.items(tree.root())[2 * keys + 1]), 71);
  EXPECT_EQ(tree.string(tree.items(tree.root())[2 * 3]), "key3");  // the order of first setting
  EXPECT_FALSE(tree.find(tree.root(), "key").has_value());
  EXPECT_FALSE(tree.find(tree.root(), "7").has_value());
}

// The first opcode alone tells data that is no pickle, before the rest is read.
TEST(PickleReader, TheFirstOpcodeRefusesDataThatIsNoPickle) {
  const std::optional<Error> zeros = check_pickle_start(std::string(16, '\0'), "zeros.pickle");
  ASSERT_TRUE(zeros.has_value());
  EXPECT_NE(zeros->message.find("zeros.pickle: byte 0: unknown pickle opcode 0x00"), std::string::npos)
      << zeros->message;
  const std::optional<Error> global = check_pickle_start("cos\nsystem\n", "code.pickle");
  ASSERT_TRUE(global.has_value());
  EXPECT_NE(global->message.find("code.pickle: byte 0: unsupported pickle opcode GLOBAL"), std::string::npos)
      << global->message;
  // A start the machine runs passes, even cut short or refused further on.
  EXPECT_FALSE(check_pickle_start(every_opcode_pickle().substr(0, 3), "cut").has_value());
  EXPECT_FALSE(check_pickle_start(Assembler().proto(4).op('c').str(), "later").has_value());
  EXPECT_FALSE(check_pickle_start("", "empty").has_value());
}

// Every error names the source and the byte offset of the opcode at fault.
void expect_error_at(const std::string& bytes, std::size_t offset, std::string_view words) {
  Result<PickleTree> parsed = parse_pickle(bytes, "bad.pickle");
  ASSERT_FALSE(parsed.ok()) << "expected an error mentioning '" << words << "'";
  EXPECT_EQ(parsed.error().code, Errc::invalid_argument);
  const std::string& message = parsed.error().message;
  EXPECT_NE(message.find("bad.pickle: byte " + std::to_string(offset) + ":"), std::string::npos) << message;
  EXPECT_NE(message.find(words), std::string::npos) << message;
}

TEST(PickleReader, EveryStrictPrefixIsATruncationError) {
  const std::string bytes = every_opcode_pickle();
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    Result<PickleTree> parsed = parse_pickle(std::string_view(bytes).substr(0, length), "cut.pickle");
    ASSERT_FALSE(parsed.ok()) << "prefix of " << length << " bytes parsed";
    EXPECT_NE(parsed.error().message.find("cut.pickle: byte "), std::string::npos) << parsed.error().message;
  }
}

TEST(PickleReader, RefusesCodeAndUnknownOpcodes) {
  Assembler global;
  global.proto(2).op('c').raw("os\nsystem\n").stop();
  expect_error_at(global.str(), 2, "GLOBAL");
  Assembler reduce;
  reduce.proto(4).op(')').op('R').stop();
  expect_error_at(reduce.str(), 3, "REDUCE");
  Assembler unknown;
  unknown.proto(4).op(0xff);
  expect_error_at(unknown.str(), 2, "unknown pickle opcode 0xff");
  Assembler future;
  future.proto(6);
  expect_error_at(future.str(), 0, "protocol 6");
}

TEST(PickleReader, ReportsStackAndMemoMisuse) {
  expect_error_at(Assembler().proto(4).stop().str(), 2, "empty stack");
  expect_error_at(Assembler().proto(4).op('e').str(), 2, "no MARK");
  expect_error_at(Assembler().proto(4).binget(7).str(), 2, "memo index 7");
  expect_error_at(Assembler().proto(4).long_binget(1).str(), 2, "memo index 1");
  expect_error_at(Assembler().proto(4).op('}').mark().binint1(1).op('u').str(), 6, "odd number");
  expect_error_at(Assembler().proto(4).op('}').binint1(1).op('a').str(), 5, "APPEND on a dict");
  expect_error_at(Assembler().proto(4).op(']').mark().binint1(1).binint1(2).op('u').str(), 8, "SETITEMS on a list");
  expect_error_at(Assembler().proto(4).op(0x86).str(), 2, "TUPLE2");
  expect_error_at(Assembler().proto(4).op(')').stop().raw("xx").str(), 4, "2 bytes after STOP");
  expect_error_at(Assembler().proto(4).op(0x95).le(100, 8).op(')').stop().str(), 2, "FRAME of 100 bytes");
  expect_error_at(Assembler().proto(4).op('X').le(50, 4).raw("abc").str(), 2, "BINUNICODE of 50 bytes");
}

}  // namespace
}  // namespace tessera::trace_detail
