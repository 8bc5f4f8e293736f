// A live block shared with another allocator (export_block, import_block, close_import) over host drivers
// with shareable chunks: bytes seen both ways; the lifetime rule (docs/allocator.md): the importer keeps its
// bytes when the exporter frees or exits, and the exporter never places another block on the exported pages;
// a pause of the exported block's tag is refused; a killed importer leaves the exporter holding nothing more;
// refusals name what is wrong; a failed driver call halfway leaves both sides consistent.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "core/export_handle.hpp"
#include "support/descriptor_passing.hpp"
#include "support/must.hpp"
#include "tessera/allocator.hpp"
#include "tessera/driver_decorators.hpp"
#include "tessera/drivers.hpp"
#include "tessera/tags.hpp"

namespace tessera {
namespace {

using test_support::must;

constexpr Bytes granule = 2 * MiB;
constexpr Bytes block_bytes = 2 * granule;

struct Side {
  std::unique_ptr<CountingDriver> driver;
  FaultInjectingDriver* faults = nullptr;
  std::unique_ptr<TesseraAllocator> allocator;
};

Side make_side(bool shareable = true, Bytes capacity = 64 * MiB) {
  Side side;
  auto faults = std::make_unique<FaultInjectingDriver>(
      must(make_host_driver({.capacity = capacity, .granularity = granule, .shareable_chunks = shareable})));
  side.faults = faults.get();
  side.driver = std::make_unique<CountingDriver>(std::move(faults));
  side.allocator = must(make_tessera_allocator(*side.driver));
  return side;
}

unsigned char* bytes_at(Address at) { return reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(at)); }

void close_all(const ExportedBlock& block) {
  for (int descriptor : core::export_descriptors(block)) close(descriptor);
}

std::size_t open_descriptors() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

class BlockExport : public ::testing::Test {
 protected:
  void TearDown() override {
    for (Side* side : {&exporter_, &importer_}) {
      side->faults->clear_all();
      EXPECT_EQ(side->allocator->check(), std::nullopt);
      must(side->allocator->empty_cache());
      side->allocator.reset();
      EXPECT_EQ(side->driver->census(), DriverCensus{}) << "left behind";
    }
  }

  Side exporter_ = make_side();
  Side importer_ = make_side();
};

TEST_F(BlockExport, AnImportedBlockSeesTheExportersBytesAndTheExporterSeesItsWrites) {
  const Address block = must(exporter_.allocator->allocate(block_bytes, default_stream));
  std::memset(bytes_at(block), 0x5A, block_bytes);
  const ExportedBlock exported = must(exporter_.allocator->export_block(block));
  EXPECT_EQ(exported.size, block_bytes);
  EXPECT_EQ(exporter_.allocator->exported_blocks(), 1u);
  const Address there = must(importer_.allocator->import_block(exported));
  close_all(exported);
  EXPECT_NE(there, block);
  EXPECT_EQ(bytes_at(there)[0], 0x5A);
  EXPECT_EQ(bytes_at(there)[block_bytes - 1], 0x5A);
  bytes_at(there)[granule + 7] = 0xA5;
  EXPECT_EQ(bytes_at(block)[granule + 7], 0xA5) << "the exporter does not see the importer's write";
  EXPECT_EQ(importer_.allocator->imported_blocks(), 1u);
  EXPECT_EQ(importer_.allocator->check(), std::nullopt);
  must(importer_.allocator->close_import(there));
  EXPECT_EQ(importer_.driver->census(), DriverCensus{}) << "the close left something in the importer's driver";
  must(exporter_.allocator->deallocate(block));
  EXPECT_EQ(exporter_.allocator->exported_blocks(), 0u);
}

// The lifetime rule: the exporter's free leaves the importer its bytes, and the exporter's next blocks of the
// same size never land on the exported pages (the importer's view stays what it was).
TEST_F(BlockExport, AFreedExportedBlockKeepsTheImportersBytesAndIsNeverReusedByTheExporter) {
  const Address block = must(exporter_.allocator->allocate(block_bytes, default_stream));
  std::memset(bytes_at(block), 0x11, block_bytes);
  const ExportedBlock exported = must(exporter_.allocator->export_block(block));
  const Address there = must(importer_.allocator->import_block(exported));
  close_all(exported);
  const std::uint64_t released_before = exporter_.driver->tally().calls_of(DriverCall::release_chunk);
  must(exporter_.allocator->deallocate(block));
  EXPECT_EQ(exporter_.allocator->check(), std::nullopt);
  // The chunk goes back once none of it is mapped: its other granules, mapped ahead below the block
  // (page_backing.cpp, map_ahead), go when empty_cache takes the idle pages back.
  must(exporter_.allocator->empty_cache());
  EXPECT_GT(exporter_.driver->tally().calls_of(DriverCall::release_chunk), released_before)
      << "the exported block's chunk stayed held after its free";
  EXPECT_EQ(exporter_.allocator->check(), std::nullopt);
  for (int round = 0; round < 4; ++round) {
    const Address next = must(exporter_.allocator->allocate(block_bytes, default_stream));
    std::memset(bytes_at(next), 0x22 + round, block_bytes);
    must(exporter_.allocator->deallocate(next));
  }
  EXPECT_EQ(bytes_at(there)[0], 0x11) << "the exporter reused the exported pages";
  EXPECT_EQ(bytes_at(there)[block_bytes - 1], 0x11);
  must(importer_.allocator->close_import(there));
}

// A freed exported block's chunk does not stay held against the limit: when reclaim takes the chunk's last
// mapped pages (here, granules of it mapped ahead below the block), the chunk goes back, and an allocation
// of the whole capacity on another stream finds the room.
TEST_F(BlockExport, AFreedExportedBlocksChunkGoesBackWhenReclaimTakesItsLastPages) {
  const Address block = must(exporter_.allocator->allocate(block_bytes, default_stream));
  const ExportedBlock exported = must(exporter_.allocator->export_block(block));
  close_all(exported);
  must(exporter_.allocator->deallocate(block));
  const Address all = must(exporter_.allocator->allocate(exporter_.driver->capacity(), StreamId{4}));
  EXPECT_EQ(exporter_.allocator->check(), std::nullopt);
  must(exporter_.allocator->deallocate(all));
}

TEST_F(BlockExport, PausingTheTagOfAnExportedBlockIsRefusedNamingIt) {
  Address block = 0;
  {
    TagScope scope("weights");
    block = must(exporter_.allocator->allocate(block_bytes, default_stream));
  }
  const ExportedBlock exported = must(exporter_.allocator->export_block(block));
  close_all(exported);
  auto paused = exporter_.allocator->pause("weights", false);
  ASSERT_FALSE(paused.ok());
  EXPECT_EQ(paused.error().code, Errc::invalid_argument);
  EXPECT_NE(paused.error().message.find(fmt::format("{:#x}", block)), std::string::npos) << paused.error().message;
  must(exporter_.allocator->deallocate(block));
  must(exporter_.allocator->pause("weights", false));  // nothing exported under it any more
  must(exporter_.allocator->resume("weights"));
}

TEST_F(BlockExport, RefusalsNameWhatIsWrongAndChangeNothing) {
  auto unknown = exporter_.allocator->export_block(0x1234);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, Errc::not_found);
  const Address small = must(exporter_.allocator->allocate(1000, default_stream));
  auto partial = exporter_.allocator->export_block(small);
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.error().code, Errc::invalid_argument);
  EXPECT_NE(partial.error().message.find("whole granules"), std::string::npos) << partial.error().message;
  must(exporter_.allocator->deallocate(small));
  EXPECT_EQ(exporter_.allocator->exported_blocks(), 0u);

  Side plain = make_side(/*shareable=*/false);
  const Address block = must(plain.allocator->allocate(block_bytes, default_stream));
  auto unsupported = plain.allocator->export_block(block);
  ASSERT_FALSE(unsupported.ok());
  EXPECT_EQ(unsupported.error().code, Errc::unsupported);
  must(plain.allocator->deallocate(block));

  auto not_imported = importer_.allocator->close_import(0x4000);
  ASSERT_FALSE(not_imported.ok());
  EXPECT_EQ(not_imported.error().code, Errc::not_found);
  ExportedBlock nonsense;
  nonsense.granule = granule;
  auto empty = importer_.allocator->import_block(nonsense);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, Errc::invalid_argument);
  EXPECT_EQ(importer_.driver->census(), DriverCensus{});
}

// Far from the limit pages can be merged: a block's own run of granules into one mapping, the granules mapped
// ahead below a block into runs. A page is shared whole, so where chunks can be shared no page is merged:
// every allocation of whole granules in a large arena stays exportable — blocks carved inside a freed larger
// block, and one carved over what was mapped ahead (an exporter of 4 GiB: the 80 MiB held are under 1/32 of it).
TEST_F(BlockExport, FarFromTheLimitEveryBlockOfWholeGranulesIsExported) {
  Side far = make_side(/*shareable=*/true, 4 * GiB);
  const Address large = must(far.allocator->allocate(20 * granule, default_stream));
  must(far.allocator->deallocate(large));
  const Address inside = must(far.allocator->allocate(12 * granule, default_stream));
  ASSERT_EQ(inside, large + 8 * granule) << "carved at the top of the freed block";
  const Address below = must(far.allocator->allocate(8 * granule, default_stream));
  ASSERT_EQ(below, large) << "the rest of the freed block";
  const Address next = must(far.allocator->allocate(2 * granule, default_stream));
  ASSERT_EQ(next, large - 2 * granule) << "carved just below, where granules were mapped ahead";
  for (const Address block : {inside, below, next}) {
    SCOPED_TRACE(fmt::format("{:#x} (the freed block at {:#x})", block, large));
    auto exported = far.allocator->export_block(block);
    ASSERT_TRUE(exported.ok()) << exported.error().message;
    close_all(*exported);
  }
  for (const Address block : {inside, below, next}) must(far.allocator->deallocate(block));
  EXPECT_EQ(far.allocator->check(), std::nullopt);
  must(far.allocator->empty_cache());
  far.allocator.reset();
  EXPECT_EQ(far.driver->census(), DriverCensus{}) << "left behind";
}

// A handle stays good while its exporter lives, its block freed or not (the descriptors hold the memory, with
// the bytes as at the free); once the exporting allocator is gone it is stale: refused, naming the block and
// the process, and nothing is kept.
TEST_F(BlockExport, AHandleWhoseExporterIsGoneIsRefusedAsStaleAndKeepsNothing) {
  Side gone = make_side();
  const Address block = must(gone.allocator->allocate(block_bytes, default_stream));
  std::memset(bytes_at(block), 0x44, block_bytes);
  const ExportedBlock exported = must(gone.allocator->export_block(block));
  must(gone.allocator->deallocate(block));
  const Address there = must(importer_.allocator->import_block(exported));
  EXPECT_EQ(bytes_at(there)[block_bytes - 1], 0x44) << "a freed block's handle lost its bytes";
  must(importer_.allocator->close_import(there));

  gone.allocator.reset();
  auto stale = importer_.allocator->import_block(exported);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code, Errc::invalid_argument);
  EXPECT_NE(stale.error().message.find(fmt::format("is stale: block {:#x} of process {}", block, getpid())),
            std::string::npos)
      << stale.error().message;
  EXPECT_EQ(importer_.allocator->imported_blocks(), 0u);
  EXPECT_EQ(importer_.driver->census(), DriverCensus{}) << "a stale import kept something";
  close_all(exported);
}

// Fault injection: a failed export makes no descriptor and marks nothing; a failed unmap at the free keeps
// the block live and exported with its bytes (check() holds) until a second free; a failed import keeps
// nothing; a failed unmap at a close leaves the rest to a second close.
TEST_F(BlockExport, AFailedDriverCallHalfwayLeavesBothSidesConsistent) {
  {  // the allocator's liveness pair (two descriptors, made at its first export) is not the test's
    const Address first = must(exporter_.allocator->allocate(block_bytes, default_stream));
    close_all(must(exporter_.allocator->export_block(first)));
    must(exporter_.allocator->deallocate(first));
  }
  const Address block = must(exporter_.allocator->allocate(block_bytes, default_stream));
  std::memset(bytes_at(block), 0x33, block_bytes);
  const std::size_t descriptors = open_descriptors();
  exporter_.faults->fail(DriverCall::export_chunk, 1);
  ASSERT_FALSE(exporter_.allocator->export_block(block).ok());
  EXPECT_EQ(open_descriptors(), descriptors) << "a failed export left a descriptor open";
  EXPECT_EQ(exporter_.allocator->exported_blocks(), 0u);
  const ExportedBlock exported = must(exporter_.allocator->export_block(block));

  importer_.faults->fail(DriverCall::import_chunk, 1);
  ASSERT_FALSE(importer_.allocator->import_block(exported).ok());
  EXPECT_EQ(importer_.driver->census(), DriverCensus{}) << "a failed import kept something";
  importer_.faults->fail(DriverCall::set_access, 1);
  ASSERT_FALSE(importer_.allocator->import_block(exported).ok());
  EXPECT_EQ(importer_.driver->census(), DriverCensus{}) << "an import that failed at its access kept something";
  const Address there = must(importer_.allocator->import_block(exported));
  close_all(exported);

  exporter_.faults->fail(DriverCall::unmap, 1);
  auto refused = exporter_.allocator->deallocate(block);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("stays live and exported"), std::string::npos) << refused.error().message;
  EXPECT_EQ(exporter_.allocator->check(), std::nullopt);
  EXPECT_EQ(exporter_.allocator->exported_blocks(), 1u);
  EXPECT_EQ(bytes_at(block)[5], 0x33);
  must(exporter_.allocator->deallocate(block));
  EXPECT_EQ(exporter_.allocator->exported_blocks(), 0u);

  importer_.faults->fail(DriverCall::unmap, 1);
  ASSERT_FALSE(importer_.allocator->close_import(there).ok());
  EXPECT_EQ(importer_.allocator->imported_blocks(), 1u);
  EXPECT_EQ(bytes_at(there)[5], 0x33) << "a failed close took the bytes";
  must(importer_.allocator->close_import(there));
  EXPECT_EQ(importer_.driver->census(), DriverCensus{});
}

// ---- two real processes ----

// The child's side: an allocator of its own; the handle and descriptors come over the socket. 0 ok, 10+ the
// step that failed.
[[noreturn]] void import_in_child(int socket, bool wait_for_exit) {
  Side side = make_side();
  auto message = receive_descriptors(socket, 4096, 64);
  if (!message) _exit(10);
  auto block = core::decode_export(message->bytes, message->descriptors);
  if (!block) _exit(11);
  auto there = side.allocator->import_block(*block);
  for (int descriptor : message->descriptors) close(descriptor);
  if (!there) _exit(12);
  if (bytes_at(*there)[0] != 0x5A) _exit(13);
  bytes_at(*there)[1] = 0xA5;
  const std::byte done{1};
  if (!send_descriptors(socket, std::span(&done, 1), {})) _exit(14);
  if (!wait_for_exit) pause();  // until killed
  std::byte gone{};
  if (read(socket, &gone, 1) != 0) _exit(15);  // end of file: the exporter freed its block and exited
  if (bytes_at(*there)[0] != 0x5A || bytes_at(*there)[1] != 0xA5 || bytes_at(*there)[block_bytes - 1] != 0x5A) _exit(16);
  if (!side.allocator->close_import(*there)) _exit(17);
  side.allocator.reset();
  _exit(side.driver->census() == DriverCensus{} ? 0 : 18);
}

struct Child {
  pid_t pid = -1;
  int socket = -1;
};

Child start_child(bool wait_for_exit) {
  std::array<int, 2> sockets{};
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets.data()) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(sockets[0]);
    import_in_child(sockets[1], wait_for_exit);
  }
  close(sockets[1]);
  return {pid, sockets[0]};
}

int exit_code(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Exports a fresh block of 0x5A bytes to the child and waits for its write.
Address share_with(Side& side, const Child& child) {
  const Address block = must(side.allocator->allocate(block_bytes, default_stream));
  std::memset(bytes_at(block), 0x5A, block_bytes);
  const ExportedBlock exported = must(side.allocator->export_block(block));
  must(send_descriptors(child.socket, core::encode_export(exported), core::export_descriptors(exported)));
  close_all(exported);
  must(receive_descriptors(child.socket, 1, 0));
  return block;
}

TEST(BlockExportBetweenProcesses, WritesAreSeenBothWaysAndTheImporterKeepsItsBytesAfterTheExporterFreesAndExits) {
  const Child child = start_child(/*wait_for_exit=*/true);
  ASSERT_GT(child.pid, 0);
  {
    Side side = make_side();
    const Address block = share_with(side, child);
    EXPECT_EQ(bytes_at(block)[1], 0xA5) << "the exporter does not see the importer's write";
    must(side.allocator->deallocate(block));
    const Address next = must(side.allocator->allocate(block_bytes, default_stream));
    std::memset(bytes_at(next), 0x77, block_bytes);  // must not reach the importer's view
    must(side.allocator->deallocate(next));
    EXPECT_EQ(side.allocator->check(), std::nullopt);
    side.allocator.reset();  // the exporter's allocator and driver go, as at an exit
  }
  close(child.socket);
  EXPECT_EQ(exit_code(child.pid), 0) << "the importer failed at a step of import_in_child";
}

// A child process exports a block, runs `before_send` (in the child), sends the handle and exits with its block
// live and its allocator never destroyed: only the exit ends the liveness. The handle, received and decoded
// after the child exited, and the child's pid.
struct HandleOfExitedChild {
  ExportedBlock exported;
  pid_t pid = -1;
};
HandleOfExitedChild handle_of_exited_child(const std::function<void()>& before_send = [] {}) {
  std::array<int, 2> sockets{};
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets.data()), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(sockets[0]);
    Side side = make_side();
    auto block = side.allocator->allocate(block_bytes, default_stream);
    if (!block) _exit(10);
    auto exported = side.allocator->export_block(*block);
    if (!exported) _exit(11);
    before_send();
    if (!send_descriptors(sockets[1], core::encode_export(*exported), core::export_descriptors(*exported))) _exit(12);
    _exit(0);
  }
  close(sockets[1]);
  EXPECT_GT(pid, 0);
  auto message = receive_descriptors(sockets[0], 4096, 64);
  close(sockets[0]);
  EXPECT_TRUE(message.ok()) << message.error().message;
  EXPECT_EQ(exit_code(pid), 0);
  return {must(core::decode_export(message->bytes, message->descriptors)), pid};
}

// A process exports a block, sends the handle and exits before the import: the handle is stale there.
TEST(BlockExportBetweenProcesses, AHandleFromAProcessThatExitedIsRefusedAsStale) {
  const auto [exported, pid] = handle_of_exited_child();
  EXPECT_EQ(exported.origin_process, static_cast<std::uint32_t>(pid));
  Side side = make_side();
  auto stale = side.allocator->import_block(exported);
  ASSERT_FALSE(stale.ok());
  EXPECT_NE(stale.error().message.find(fmt::format("of process {} was exported by an allocator that is gone", pid)),
            std::string::npos)
      << stale.error().message;
  EXPECT_EQ(side.driver->census(), DriverCensus{});
  close_all(exported);
}

// A DataLoader-like child forked by the exporter after the export outlives it: the handle is stale all the
// same, as the child closed the liveness it inherited (without that, the child would keep it live).
TEST(BlockExportBetweenProcesses, AForkedChildDoesNotKeepItsParentsHandlesLive) {
  std::array<int, 2> release{};  // the worker lives until the test closes its write end
  ASSERT_EQ(pipe2(release.data(), O_CLOEXEC), 0);
  const auto [exported, pid] = handle_of_exited_child([&release] {
    // The worker closes the inherited liveness as it starts (its fork handler): until it has run, the
    // handle is still live. It says when it runs.
    std::array<int, 2> started{};
    if (pipe2(started.data(), O_CLOEXEC) != 0) _exit(14);
    const pid_t worker = fork();
    if (worker < 0) _exit(13);
    if (worker == 0) {
      close(release[1]);
      char byte = 1;
      if (write(started[1], &byte, 1) != 1) _exit(1);
      while (read(release[0], &byte, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    char byte = 0;
    if (read(started[0], &byte, 1) != 1) _exit(15);
  });
  close(release[0]);
  Side side = make_side();
  auto stale = side.allocator->import_block(exported);
  close(release[1]);  // the worker may go now
  ASSERT_FALSE(stale.ok()) << "the exporter's forked child kept its handle live (child " << pid << ")";
  EXPECT_NE(stale.error().message.find("is stale"), std::string::npos) << stale.error().message;
  EXPECT_EQ(side.driver->census(), DriverCensus{});
  close_all(exported);
}

// The liveness pipe cannot be made (the process has one descriptor left, the pipe needs two): the export
// fails naming why, marks nothing, and the block stays live, freeable and consistent. In a child, whose descriptor limit it lowers.
TEST(BlockExportBetweenProcesses, AnExportWithNoDescriptorLeftFailsAndMarksNothing) {
  const pid_t pid = fork();
  if (pid == 0) {
    Side side = make_side();
    auto block = side.allocator->allocate(block_bytes, default_stream);
    if (!block) _exit(10);
    // One descriptor left: the pipe needs two. (Not none: a sanitizer's runtime opens a file to report.)
    const int lowest_free = fcntl(0, F_DUPFD, 0);  // no free number below it
    if (lowest_free < 0) _exit(11);
    close(lowest_free);
    const rlimit limit{static_cast<rlim_t>(lowest_free) + 1, static_cast<rlim_t>(lowest_free) + 1};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(12);
    auto exported = side.allocator->export_block(*block);
    if (exported) _exit(13);
    if (exported.error().code != Errc::platform) _exit(14);
    if (exported.error().message.find("no liveness descriptor") == std::string::npos) _exit(15);
    if (side.allocator->exported_blocks() != 0) _exit(16);
    if (side.allocator->check() != std::nullopt) _exit(17);
    if (!side.allocator->deallocate(*block)) _exit(18);
    if (side.allocator->check() != std::nullopt) _exit(19);
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  EXPECT_EQ(exit_code(pid), 0) << "the step that failed: see the exit codes in the child";
}

TEST(BlockExportBetweenProcesses, AnImporterKilledWithSigkillLeavesTheExporterHoldingNothingMore) {
  Side side = make_side();
  const Child child = start_child(/*wait_for_exit=*/false);
  ASSERT_GT(child.pid, 0);
  const Address block = share_with(side, child);
  kill(child.pid, SIGKILL);
  EXPECT_EQ(exit_code(child.pid), 128 + SIGKILL);
  close(child.socket);
  must(side.allocator->deallocate(block));
  must(side.allocator->empty_cache());
  EXPECT_EQ(side.allocator->exported_blocks(), 0u);
  EXPECT_EQ(side.driver->census().pages, 0u) << "the exporter holds a chunk after its importer died";
  EXPECT_EQ(side.allocator->check(), std::nullopt);
}

}  // namespace
}  // namespace tessera
