// A block another process exported, as this process maps it (bookkeeping, layer 2): a reservation of its own,
// the chunks imported and the mappings made, so that a close undoes exactly what the import did — and, after a
// failed call, what is left of it.
#pragma once

#include <vector>

#include "tessera/types.hpp"

namespace tessera::core {

struct ImportedBlock {
  Address base = 0;  // the reservation (0: released)
  Bytes span = 0;
  Bytes size = 0;  // the block's bytes, from base
  std::vector<ChunkId> chunks;    // imported and not yet released
  std::vector<Address> mappings;  // made and not yet unmapped
};

}  // namespace tessera::core
