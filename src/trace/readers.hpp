// The readers' entry points once the input is inflated, for the public parse_* functions and for
// read_trace, which inflates once and then picks the format. `inflated` says that byte offsets are in the
// inflated data, not in the file.
#pragma once

#include <string_view>

#include "tessera/trace.hpp"

namespace tessera::trace_detail {

Result<PytorchRecording> parse_pytorch_inflated(std::string_view bytes, std::string_view source, bool inflated,
                                                const PytorchSnapshotOptions& options);
Result<Trace> parse_lifetimes_inflated(std::string_view text, std::string_view source);
Result<Trace> parse_stalloc_inflated(std::string_view text, std::string_view source);
Result<Trace> parse_text_inflated(std::string_view text, std::string_view source);

}  // namespace tessera::trace_detail
