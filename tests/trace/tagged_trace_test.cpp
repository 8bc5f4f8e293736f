// Tags, pause and resume in traces: the text format writes and reads them, an untagged trace is written as
// before, validate() refuses each misuse naming the event, and summarize() gives the resident peak.
#include <gtest/gtest.h>

#include <string>

#include "tessera/trace.hpp"

namespace tessera {
namespace {

// Two tags: weights (backed up), kv_cache (discarded); an untagged block allocated while both are paused.
constexpr std::string_view tagged_text =
    "tessera-trace 1\n"
    "tag weights\n"
    "tag kv_cache\n"
    "a 0 1000 tag=weights\n"
    "a 1 300 0 5 tag=kv_cache\n"
    "a 2 50\n"
    "pause weights backup\n"
    "pause kv_cache discard 7\n"
    "a 3 900\n"
    "f 1\n"
    "f 3\n"
    "resume weights\n"
    "resume kv_cache 9\n"
    "a 4 20 tag=kv_cache\n"
    "end\n";

Trace tagged_trace() {
  Trace trace;
  trace.name = "tagged";
  trace.streams = {StreamId{0}};
  trace.tags = {"default", "weights", "kv_cache"};
  trace.events = {
      TraceEvent::tagged_alloc(0, 1000, 0, 1), TraceEvent::tagged_alloc(1, 300, 0, 2, 5), TraceEvent::alloc(2, 50, 0),
      TraceEvent::pause(1, true),               TraceEvent::pause(2, false, 7),             TraceEvent::alloc(3, 900, 0),
      TraceEvent::free(1, 300, 0),              TraceEvent::free(3, 900, 0),                TraceEvent::resume(1),
      TraceEvent::resume(2, 9),                 TraceEvent::tagged_alloc(4, 20, 0, 2),
  };
  trace.block_count = 5;
  return trace;
}

std::string error_of(const Trace& trace) {
  Result<void> valid = validate(trace);
  return valid ? std::string("(accepted)") : valid.error().message;
}

TEST(TaggedTrace, ReadsTagsPausesAndResumes) {
  Result<Trace> read = parse_text_trace(tagged_text, "tagged.trace");
  ASSERT_TRUE(read.ok()) << describe(read.error());
  EXPECT_EQ(*read, tagged_trace());
  EXPECT_TRUE(validate(*read).ok());
}

TEST(TaggedTrace, WritesWhatItReads) {
  const Trace trace = tagged_trace();
  const std::string text = format_text_trace(trace);
  // The writer's comment line counts the events; the records after it are the hand-written ones.
  const std::string records(tagged_text.substr(tagged_text.find('\n') + 1));
  EXPECT_NE(text.find(records), std::string::npos) << text;
  Result<Trace> back = parse_text_trace(text, "tagged.trace");
  ASSERT_TRUE(back.ok()) << describe(back.error());
  EXPECT_EQ(*back, trace);
}

TEST(TaggedTrace, AnUntaggedTraceIsWrittenWithoutTags) {
  Trace trace;
  trace.name = "plain";
  trace.streams = {StreamId{0}};
  trace.events = {TraceEvent::alloc(0, 10, 0), TraceEvent::free(0, 10, 0)};
  trace.block_count = 1;
  EXPECT_EQ(format_text_trace(trace),
            "tessera-trace 1\n# 0 initial blocks, 2 events, 1 blocks\nname plain\ns 0\na 0 10\nf 0\nend\n");
}

TEST(TaggedTrace, TheResidentPeakLeavesPausedTagsOut) {
  const TraceSummary summary = summarize(tagged_trace());
  EXPECT_EQ(summary.peak_live_bytes, 2250u);  // 1000 + 300 + 50 + 900, after event 5
  EXPECT_EQ(summary.peak_event, 5u);
  // While paused: 50 + 900; after the resume: 1000 + 50 (block 1 was freed while paused); then + 20.
  EXPECT_EQ(summary.peak_resident_bytes, 1350u);  // 1000 + 300 + 50, before the pause
  EXPECT_EQ(summary.peak_resident_event, 2u);
  EXPECT_EQ(summary.pauses, 2u);
  EXPECT_EQ(summary.resumes, 2u);

  Trace later = tagged_trace();
  later.events.push_back(TraceEvent::alloc(5, 400, 0));  // 1070 + 400 resident, above 1350
  later.block_count = 6;
  const TraceSummary more = summarize(later);
  EXPECT_EQ(more.peak_resident_bytes, 1470u);
  EXPECT_EQ(more.peak_resident_event, 11u);
}

TEST(TaggedTrace, ValidateNamesEachMisuse) {
  Trace unknown = tagged_trace();
  unknown.events[3] = TraceEvent::pause(3, true);
  EXPECT_EQ(error_of(unknown), "trace tagged: event 3 (pause) names tag 3, beyond the 3 tags");

  Trace twice = tagged_trace();
  twice.events[4] = TraceEvent::pause(1, false);
  EXPECT_EQ(error_of(twice), "trace tagged: event 4 pauses tag 'weights', which is paused already");

  Trace not_paused = tagged_trace();
  not_paused.events.push_back(TraceEvent::resume(1));
  EXPECT_EQ(error_of(not_paused), "trace tagged: event 11 resumes tag 'weights', which is not paused");

  Trace alloc_paused = tagged_trace();
  alloc_paused.events[5] = TraceEvent::tagged_alloc(3, 900, 0, 2);
  EXPECT_EQ(error_of(alloc_paused), "trace tagged: event 5 allocates block 3 under tag 'kv_cache', which is paused");

  Trace alloc_unknown = tagged_trace();
  alloc_unknown.events[0] = TraceEvent::tagged_alloc(0, 1000, 0, 7);
  EXPECT_EQ(error_of(alloc_unknown), "trace tagged: event 0 (alloc) names tag 7, beyond the 3 tags");

  Trace no_default = tagged_trace();
  no_default.tags[0] = "weights0";
  EXPECT_EQ(error_of(no_default), "trace tagged: the tag table must start with 'default'");

  Trace repeated = tagged_trace();
  repeated.tags[2] = "weights";
  EXPECT_EQ(error_of(repeated), "trace tagged: tag 2 'weights' is in the tag table twice");

  Trace spaced = tagged_trace();
  spaced.tags[2] = "kv cache";
  EXPECT_EQ(error_of(spaced), "trace tagged: tag 2 'kv cache' is not one word of printable characters");
}

TEST(TaggedTrace, TheReaderNamesTheLine) {
  auto error = [](std::string_view records) {
    const std::string text = "tessera-trace 1\ntag weights\n" + std::string(records) + "end\n";
    Result<Trace> read = parse_text_trace(text, "bad.trace");
    return read ? std::string("(accepted)") : read.error().message;
  };
  EXPECT_EQ(error("pause kv_cache backup\n"),
            "bad.trace:3: unknown tag 'kv_cache' (declare it with 'tag kv_cache' before the first event)");
  EXPECT_EQ(error("a 0 10 tag=kv\n"), "bad.trace:3: unknown tag 'kv' (declare it with 'tag kv' before the first event)");
  EXPECT_EQ(error("pause weights keep\n"), "bad.trace:3: 'pause' takes 'backup' or 'discard', not 'keep'");
  EXPECT_EQ(error("pause weights\n"), "bad.trace:3: 'pause' takes 2 to 3 fields, not 1");
  EXPECT_EQ(error("pause weights backup\npause weights discard\n"),
            "bad.trace:4: pause of tag 'weights', which is paused already");
  EXPECT_EQ(error("resume weights\n"), "bad.trace:3: resume of tag 'weights', which is not paused");
  EXPECT_EQ(error("pause weights backup\na 0 10 tag=weights\n"),
            "bad.trace:4: an alloc under tag 'weights', which is paused");
  EXPECT_EQ(error("tag weights\n"), "bad.trace:3: tag 'weights' is declared twice");
  EXPECT_EQ(error("tag default\n"), "bad.trace:3: 'default' is the tag of untagged blocks; it is not declared");
  EXPECT_EQ(error("a 0 10\ntag late\n"), "bad.trace:4: 'tag' after the first event");
  EXPECT_EQ(error("pause weights backup x\n"), "bad.trace:3: time 'x' is not an integer");
  // The untagged default tag can be paused too, and a free under a paused tag is allowed.
  EXPECT_EQ(error("a 0 10\npause default discard\nf 0\nresume default\n"), "(accepted)");
}

}  // namespace
}  // namespace tessera
