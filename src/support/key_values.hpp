// `key:value,key:value` strings (PyTorch's PYTORCH_CUDA_ALLOC_CONF form, and TESSERA_ALLOC_CONF): split into
// entries, each key and value trimmed. What each key means is the caller's business.
#pragma once

#include <string_view>
#include <vector>

#include "tessera/result.hpp"

namespace tessera::support {

struct KeyValue {
  std::string_view key;
  std::string_view value;  // may be empty ("key:")
};

// Blank text is no entries; one comma after the last entry is allowed. An empty entry ("a:1,,b:2"), an
// entry without a colon, an empty key, or a key given twice is an Errc::invalid_argument error whose message
// names the entry or key; the caller puts its own prefix (which string) in front. The views point into `text`.
Result<std::vector<KeyValue>> split_key_values(std::string_view text);

}  // namespace tessera::support
