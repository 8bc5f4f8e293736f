// Tessera's allocator: a caching allocator that owns the mapping between virtual addresses and physical
// pages. It reserves virtual space once per (stream, pool), maps granule pages under blocks as they are
// needed, and when a request fits no cached block it builds the block from pooled pages, then from new
// pages, then from the pages of idle cached blocks anywhere (stitching) — so the memory it holds stays
// close to the bytes that are live. docs/allocator.md walks one allocation through every layer.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/allocator_observer.hpp"
#include "tessera/device_allocator.hpp"
#include "tessera/driver.hpp"
#include "tessera/snapshot.hpp"
#include "tessera/tags.hpp"
#include "tessera/usage.hpp"

namespace tessera {

// Configuration, from a string in PyTorch's `key:value,key:value` form (TESSERA_ALLOC_CONF). PyTorch's keys
// keep PyTorch's meaning; the others are Tessera's. docs/allocator.md lists them with their defaults.
// There is no max_split_size_mb: it protects large cached blocks from small requests, and Tessera keeps
// small requests in their own pool and can take any idle page back, so the problem it works around is gone.
struct AllocatorConfig {
  // PyTorch: when the memory held passes this fraction of capacity, idle pages go back, oldest first.
  // 0: off.
  double garbage_collection_threshold = 0.0;
  // PyTorch: round sizes up to one of N divisions of their power-of-two interval. 0: plain 512 B rounding.
  unsigned roundup_power2_divisions = 0;
  // Tessera: requests of at most this many bytes go to the small pool.
  Bytes small_max = 1 * MiB;
  // Tessera: the largest page created at once (a whole number of granules; the granule itself when
  // smaller). Above the granule, the inside of a large block gets one page, and while at most half the
  // limit is held a new page may run on into the free space after the block, as expandable segments grow.
  // Fewer, larger pages cost fewer driver calls, but a page goes back only when all of it is idle, so the
  // default, 0, keeps one granule per page: least memory (docs/allocator.md has the trade-off measured).
  Bytes page_max = 0;
  // Tessera: the most physical memory created by one driver call. Where the driver can map part of a
  // physical allocation (capability partial_map), the pages a block needs come from one chunk: one create
  // call instead of one per page, while each page is still mapped, reclaimed and moved on its own. A chunk
  // goes back to the device only when all of it is idle (as a PyTorch segment does), so empty_cache and
  // garbage collection give back whole idle chunks. While the device has room, a new chunk is made larger
  // than the block needs (as much again, or half of what is held, at most half of chunk_max) and the rest is
  // pooled for the blocks that follow. 0 (or up to the page): one call per page.
  Bytes chunk_max = 1024 * MiB;
  // Tessera: when a block needs pages and none are pooled, whether to take the pages of idle cached blocks
  // (after proving them idle) before creating new ones (first), only when no new page can be created
  // (when_full), or never.
  enum class Reclaim : std::uint8_t { never, when_full, first };
  Reclaim reclaim = Reclaim::when_full;
  // Tessera: the last step of the out-of-memory ladder. A request that no free block and no pooled or new
  // page can hold is built in its own virtual range whose first and last granule slots map granules that
  // live blocks of its stream already half use (their free edges, "slivers"), with whole pages between:
  // up to two granules fewer than any contiguous placement needs. Needs a driver that maps parts of pages
  // at several addresses (partial_map, page_multi_mapping); such a block costs a few driver calls and is
  // unmapped when its free's events complete.
  bool share_slivers = true;
  // Tessera: virtual space reserved per (stream, pool), as a multiple of the device capacity.
  unsigned virtual_factor = 2;
  // Tessera: whether the host buffers of a tag's backups are kept after its resume for the next pause (a
  // colocated job pauses the same blocks every step; allocating and pinning the host memory again would cost
  // as much as the copy). empty_cache frees them; off frees them at each resume.
  bool backup_cache = true;

  bool operator==(const AllocatorConfig&) const = default;
};

// One table of keys (src/core/option_table.cpp) gives each key its type, range, default and meaning; the
// parser, check_allocator_config and allocator_options() all read it.
//
// Parses `key:value,key:value`. An unknown key, a repeated key, or a bad or out-of-range value is an
// Errc::invalid_argument error that names the key.
Result<AllocatorConfig> parse_allocator_config(std::string_view text);
// Checks a configuration built in code against the same ranges (make_tessera_allocator calls it); a size
// field may be any number of bytes inside its key's range. The error names the field and its key.
Result<void> check_allocator_config(const AllocatorConfig& config);
// Reads TESSERA_ALLOC_CONF (defaults when unset).
Result<AllocatorConfig> allocator_config_from_environment();

// One key of the configuration string, as docs/allocator.md's table lists it.
struct OptionDescription {
  std::string_view key;
  std::string type;           // the type and range in words: "a whole number of KiB from 4 to 65536"
  std::string default_value;  // AllocatorConfig{}'s value, as the string writes it
  std::string_view meaning;
};
const std::vector<OptionDescription>& allocator_options();

// The memory of one tag (tags.hpp), now.
struct TagStats {
  std::string tag;
  bool paused = false;
  Bytes allocated_bytes = 0;  // live blocks, rounded (paused ones included)
  Bytes reserved_bytes = 0;   // pages mapped under the tag's regions
  Bytes paused_bytes = 0;     // live blocks whose pages were given back by a pause
  Bytes backup_bytes = 0;     // host memory holding their contents
};

// One pool's memory now, read from the allocator's state: what PyTorch's memory_stats() calls
// reserved_bytes.<pool>, segment.<pool>, inactive_split_bytes.<pool> and inactive_split.<pool>, in Tessera's
// terms (docs/pytorch.md, "Statistics", says where they differ from PyTorch's).
struct PoolStats {
  Bytes mapped_bytes = 0;        // pages mapped under the pool's segments (not a shared block's slivers)
  std::uint64_t segments = 0;    // segments (snapshot.hpp: a region, or a shared block's range) holding any
  // Free bytes in mapped granules that a block in use (live, lent, or freed and waiting for events) also
  // touches: cached memory that cannot go back to the device while that block lives. And the free blocks
  // holding any.
  Bytes inactive_split_bytes = 0;
  std::uint64_t inactive_split = 0;
};

// Tessera's own statistics beside PyTorch's.
struct TesseraStats {
  AllocatorStats common;
  Bytes mapped_bytes = 0;
  Bytes pooled_bytes = 0;
  Bytes cached_bytes = 0;  // mapped under no live block
  std::uint64_t pages_mapped = 0;
  std::uint64_t pages_unmapped = 0;
  std::uint64_t stitches = 0;
  std::uint64_t pages_stitched = 0;
  std::uint64_t pages_reclaimed = 0;
  std::uint64_t syncs = 0;
  // Blocks built on the out-of-memory ladder over slivers (free edges of granules that live blocks half
  // use), and the slivers they borrowed.
  std::uint64_t shared_blocks = 0;
  std::uint64_t slivers_shared = 0;
  // Granules that shared blocks map a second time, now (not in mapped_bytes: the driver's count of mapped
  // bytes is mapped_bytes + sliver_mapped_bytes, of mappings pages_mapped - pages_unmapped + sliver_mappings).
  std::uint64_t sliver_mappings = 0;
  Bytes sliver_mapped_bytes = 0;
  // Host memory of backup buffers kept for the next pause (AllocatorConfig::backup_cache).
  Bytes backup_cache_bytes = 0;
  // Pauses and resumes of tags that changed something.
  std::uint64_t pauses = 0;
  std::uint64_t resumes = 0;
  // Every tag this allocator has allocated under, in the order first used.
  std::vector<TagStats> tags;
  // Private pools (begin_allocate_to_pool) not yet released, and the pages mapped under every private pool's
  // arenas, released ones' included (their blocks still live, or their memory cached).
  std::uint64_t private_pools = 0;
  Bytes private_pool_mapped_bytes = 0;
  // By SizePool (small, large); pooled pages belong to neither.
  std::array<PoolStats, 2> pools{};
};

// A live block exported for another process on the same machine (TesseraAllocator::export_block): the chunks
// under it, each a descriptor the caller owns (sends, then closes), and the pieces of them that tile the
// block's granules in address order. docs/allocator.md, "Sharing a block with another process".
struct ExportedPiece {
  std::uint32_t chunk = 0;  // an index into ExportedBlock::chunks
  Bytes chunk_offset = 0;   // where the piece starts in its chunk: a granule multiple
  Bytes size = 0;           // a granule multiple
};

struct ExportedBlock {
  std::vector<ExportedChunk> chunks;
  std::vector<ExportedPiece> pieces;
  Bytes size = 0;     // the block's bytes, as requested
  Bytes granule = 0;  // the exporter's; an importer of another granule refuses the block
  // A descriptor the caller owns beside the chunks' that reads as hung up once the exporter is gone (its
  // process exited, or its allocator went): a handle is then stale and its import refused.
  int liveness = -1;
  // Where the block lies in the exporting process, and which process that is, to name a stale handle.
  Address origin = 0;
  std::uint32_t origin_process = 0;
};

class TesseraAllocator : public DeviceAllocator {
 public:
  virtual TesseraStats tessera_stats() const = 0;
  // Per-pool counts in PyTorch's memory_stats() terms (usage.hpp), since the allocator was made; kept as it
  // goes, so reading them scans nothing. reset_peak_usage starts every peak again from the current value
  // (PyTorch's reset_peak_memory_stats); AllocatorStats' own peaks never reset.
  virtual Usage usage() const = 0;
  virtual void reset_peak_usage() = 0;
  virtual AllocatorSnapshot snapshot() const = 0;
  virtual const AllocatorConfig& config() const noexcept = 0;
  // Lower the memory this allocator may hold to a fraction of the device capacity (PyTorch's
  // set_per_process_memory_fraction). Must be in (0, 1].
  virtual Result<void> set_memory_fraction(double fraction) = 0;
  // Every observer sees every change from now on; the allocator does not own it.
  virtual void add_observer(AllocatorObserver& observer) = 0;
  // Checks every invariant from scratch; a description of the first broken one.
  virtual std::optional<std::string> check() const = 0;
  // Starts recording the allocation history into a ring of the newest `max_events` allocs, frees and changes
  // of the device memory held (pages mapped, unmapped, pooled: AllocationHistory::segment_changes), as
  // PyTorch's max_entries counts its segment entries too; 0 stops recording and forgets what was recorded.
  // Recording again resizes the ring and keeps the newest events.
  virtual void record_history(std::size_t max_events) = 0;
  // While the history records, each alloc files the stack `capture` returns (null or empty: none), as
  // PyTorch's history files its frames. It is called on the allocating thread before the allocator's lock is
  // taken, so that it may call into an interpreter that other threads need to allocate; an empty function
  // stops it. A capture that returns the same object for the same stack has it filed once. Off (the default)
  // it costs an allocation one relaxed atomic load.
  using StackCapture = std::function<std::shared_ptr<const Stack>()>;
  virtual void set_history_stacks(StackCapture capture) = 0;
  // The history and the state, taken together under the allocator's lock.
  virtual AllocationHistory history() const = 0;

  // Pause and resume by tag (DeviceAllocator::pause and resume; docs/allocator.md, "Pausing a tag").
  //
  // pause: proves the device done with the tag's blocks (a synchronize of the streams that used them and a
  // wait for their pending frees), copies to host memory (pinned where the platform has it) the bytes of each
  // live block allocated with OnPause::back_up (tags.hpp: the choice is the block's), and of every live block
  // when `backup`, then unmaps every page under the tag — live blocks' and cached ones — and gives wholly
  // unmapped chunks back to the device. Every address stays reserved: a paused block keeps its address and
  // nothing else is placed there. While paused, allocating under the tag is an error naming it; freeing a
  // paused block works (its backup goes). Pausing a paused tag finishes what a failed pause left mapped, else
  // does nothing; with `backup` it is refused when a block of the tag has no backup (its bytes are gone: the
  // caller asked for what cannot be given). An unknown tag is an error naming it.
  // A failure before the unmapping (the proof, a backup) leaves the tag as it was; a failure while unmapping
  // leaves it paused, every backup intact, and a second pause unmaps the rest. check() holds either way.
  //
  // resume: maps pages under every granule a paused live block touches, at the same addresses — pooled
  // pages first, then idle cached pages from anywhere, new pages last —, copies the backups back and frees
  // them. Without a backup a block's contents are unspecified. Out of memory is an answer that says how much
  // was needed and what is free: the tag stays paused with every backup intact, and a later resume succeeds
  // once memory is free. Resuming a tag that is not paused does nothing.
  // The tags this allocator has allocated under, in the order first used.
  virtual std::vector<std::string> tags() const = 0;

  // Sharing a live block with another process (docs/allocator.md, "Sharing a block with another process"; the
  // driver needs the capability shareable_chunks).
  //
  // export_block: the chunks under a live block, exported, and the pieces that tile it. The block must lie on
  // whole granules (its address and size granule multiples, its pages its own): a block that shares a granule
  // or a page with another is refused, naming it. From now on the block is exported: pausing its tag is
  // refused, and at its free its pages are unmapped and retired — never reused for another block — and their
  // chunks go back to the device once nothing else of them is mapped. On a failure nothing changed (the
  // descriptors made so far are closed). The liveness descriptor is the caller's too.
  virtual Result<ExportedBlock> export_block(Address address) = 0;
  // import_block: maps a block another process exported at a range of this allocator's own, with access:
  // the address of its first byte. The descriptors stay the caller's. A block that does not add up (no piece,
  // a piece off the granule or past its chunk, a granule not this allocator's, a size larger than the pieces)
  // is Errc::invalid_argument naming what is wrong, and so is a stale one, whose exporter is gone (its
  // liveness descriptor hung up); on any failure nothing is kept. A block freed by its exporter since the
  // export is not stale: the chunks' descriptors hold its memory, and the importer gets its bytes as they
  // were at the free (as a block PyTorch sent to another process stays held until that process releases it).
  virtual Result<Address> import_block(const ExportedBlock& block) = 0;
  // close_import: proves the device done (a device-wide synchronize), unmaps, releases the imported chunks
  // and the range. An address that is no imported block is Errc::not_found. A failure leaves the rest to a
  // second close.
  virtual Result<void> close_import(Address address) = 0;
  // Live blocks exported, and blocks imported and not closed.
  virtual std::size_t exported_blocks() const = 0;
  virtual std::size_t imported_blocks() const = 0;
};

// The allocator does not own the driver; one allocator per device. Thread-safe.
Result<std::unique_ptr<TesseraAllocator>> make_tessera_allocator(Driver& driver, const AllocatorConfig& config = {});

}  // namespace tessera
