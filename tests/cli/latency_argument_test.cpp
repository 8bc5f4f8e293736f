// --latency-model on the command line: the default, the two names, and errors that name the option.
#include "latency_argument.hpp"

#include <gtest/gtest.h>

#include "usage_error.hpp"

namespace tessera::cli {
namespace {

std::string refusal(const std::optional<std::string>& text, std::string_view driver) {
  try {
    (void)parse_latency_model_argument("--latency-model", text, driver);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "accepted";
}

TEST(LatencyModelArgument, NoneGivenIsPerCall) {
  EXPECT_EQ(parse_latency_model_argument("--latency-model", std::nullopt, "sim"), LatencyScaling::per_call);
  EXPECT_EQ(parse_latency_model_argument("--latency-model", std::nullopt, "host"), LatencyScaling::per_call);
}

TEST(LatencyModelArgument, EachNameOnTheSimDriver) {
  EXPECT_EQ(parse_latency_model_argument("--latency-model", "per_call", "sim"), LatencyScaling::per_call);
  EXPECT_EQ(parse_latency_model_argument("--latency-model", "per_byte", "sim"), LatencyScaling::per_byte);
}

TEST(LatencyModelArgument, AnUnknownNameIsRefusedWithTheChoices) {
  EXPECT_EQ(refusal("bytes", "sim"), "--latency-model: unknown latency model 'bytes' (expected per_call or per_byte)");
  EXPECT_EQ(refusal("", "sim"), "--latency-model: unknown latency model '' (expected per_call or per_byte)");
}

TEST(LatencyModelArgument, OnlyTheSimDriverModelsLatencies) {
  const std::string message = refusal("per_byte", "host");
  EXPECT_TRUE(message.starts_with("--latency-model: a latency model is for the sim driver")) << message;
}

TEST(LatencyModelArgument, TheNoteNamesTheModel) {
  ReplayOptions options;
  EXPECT_NE(latency_model_note(options).find("latency model per_call"), std::string::npos);
  options.sim_latency = LatencyScaling::per_byte;
  EXPECT_NE(latency_model_note(options).find("latency model per_byte"), std::string::npos);
  options.driver = "host";
  EXPECT_EQ(latency_model_note(options), "") << "the host driver's times are measured";
}

}  // namespace
}  // namespace tessera::cli
