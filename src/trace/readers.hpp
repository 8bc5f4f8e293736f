// The readers' entry points once the input is inflated, for the public parse_* functions and for
// read_trace, which inflates once and then picks the format. `inflated` says that byte offsets are in the
// inflated data, not in the file.
#pragma once

#include <filesystem>
#include <optional>
#include <string_view>

#include "tessera/trace.hpp"
#include "trace/gzip_file.hpp"

namespace tessera::trace_detail {

// The format read_trace reads content as: `format` when forced, else from the content, else from the name.
// A first non-blank line holding a NUL byte is binary, no text format.
TraceFormat format_by_content(std::string_view bytes);
// The text without a leading UTF-8 byte order mark (spreadsheets write one before a CSV's header): the CSV
// readers and read_trace's text formats skip it, and read_trace chooses the format by what follows it.
std::string_view without_utf8_bom(std::string_view text);
TraceFormat format_by_extension(std::string_view source);
Error unknown_format_error(std::string_view source);

// The PrefixCheck for content read as `format` (automatic: chosen as read_trace chooses) from `source`: it
// refuses a start that can be no such trace (no format at all, a first byte that is no pickle opcode the
// reader runs, a text format's first line with a NUL byte) with the error naming the source and the
// position, and passes a start it cannot yet judge (a first line longer than the prefix).
PrefixCheck trace_start_check(TraceFormat format, std::string_view source);

Result<PytorchRecording> parse_pytorch_inflated(std::string_view bytes, std::string_view source, bool inflated,
                                                const PytorchSnapshotOptions& options);
Result<ProfileRecording> parse_kineto_inflated(std::string_view text, std::string_view source, bool inflated,
                                               const KinetoTraceOptions& options);
Result<ProfileRecording> parse_operator_memory_inflated(std::string_view text, std::string_view source,
                                                        const OperatorMemoryOptions& options);
// read_recording's step for an operator_memory.csv at `path`: when memory_record.csv lies in the same folder,
// its real-allocator totals (totals_from_memory_record) replace the recording's where it has any.
Result<void> take_memory_record_beside(const std::filesystem::path& path, ProfileRecording& recording);
Result<Trace> parse_lifetimes_inflated(std::string_view text, std::string_view source);
Result<Trace> parse_stalloc_inflated(std::string_view text, std::string_view source);
Result<Trace> parse_text_inflated(std::string_view text, std::string_view source);

}  // namespace tessera::trace_detail
