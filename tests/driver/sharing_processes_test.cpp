// Chunks shared between two real processes (fork, then each makes its own host driver, as two unrelated
// processes would): descriptors cross a Unix socket with SCM_RIGHTS (send_descriptors), writes are seen both
// ways, the importer's memory outlives the exporter, and an importer killed with SIGKILL leaves the
// exporter's driver holding nothing more than before.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "driver_fixtures.hpp"
#include "support/descriptor_passing.hpp"

namespace tessera::testing {
namespace {

constexpr Bytes chunk_bytes = 2 * MiB;

std::unique_ptr<Driver> shareable_host() {
  auto made = make_host_driver({.capacity = 16 * MiB, .shareable_chunks = true});
  if (!made) return nullptr;
  return std::move(made).value();
}

// The child's side, in a forked process: no gtest there, an exit code says what went wrong.
// 0 ok; 10+ the step that failed.
[[noreturn]] void importer(int socket, bool read_after_exporter_exit) {
  auto driver = shareable_host();
  if (!driver) _exit(10);
  auto message = receive_descriptors(socket, 64, 1);
  if (!message || message->descriptors.size() != 1) _exit(11);
  auto chunk = driver->import_chunk(message->descriptors[0], 0, chunk_bytes);
  close(message->descriptors[0]);
  if (!chunk) _exit(12);
  auto at = driver->reserve(chunk_bytes);
  if (!at || !driver->map(*at, *chunk) || !driver->set_access(*at, chunk_bytes)) _exit(13);
  unsigned char seen = 0;
  if (!driver->read(*at, &seen, 1) || seen != 0x5A) _exit(14);  // the exporter's byte
  const unsigned char reply = 0xA5;
  if (!driver->write(*at + 1, &reply, 1)) _exit(15);
  const std::byte done{1};
  if (!send_descriptors(socket, std::span(&done, 1), {})) _exit(16);
  if (read_after_exporter_exit) {
    std::byte gone{};
    if (read(socket, &gone, 1) != 0) _exit(17);  // end of file: the exporter is gone
    if (!driver->read(*at + 1, &seen, 1) || seen != 0xA5 || !driver->read(*at, &seen, 1) || seen != 0x5A) _exit(18);
  } else {
    pause();  // until killed
  }
  if (!driver->unmap(*at) || !driver->release_chunk(*chunk) || !driver->release_reservation(*at)) _exit(19);
  _exit(driver->census() == DriverCensus{} ? 0 : 20);
}

struct Pair {
  pid_t child = -1;
  int socket = -1;
};

Pair start_importer(bool read_after_exporter_exit) {
  std::array<int, 2> sockets{};
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets.data()) != 0) return {};
  const pid_t child = fork();
  if (child == 0) {
    close(sockets[0]);
    importer(sockets[1], read_after_exporter_exit);
  }
  close(sockets[1]);
  return {child, sockets[0]};
}

int exit_code(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(SharingBetweenProcesses, WritesAreSeenBothWaysAndTheImporterOutlivesTheExportersRelease) {
  const Pair pair = start_importer(/*read_after_exporter_exit=*/true);
  ASSERT_GT(pair.child, 0);
  {
    auto driver = shareable_host();
    ASSERT_TRUE(driver);
    const Address at = TESSERA_OK(driver->reserve(chunk_bytes));
    const ChunkId chunk = TESSERA_OK(driver->create_chunk(chunk_bytes));
    TESSERA_OK(driver->map(at, chunk));
    TESSERA_OK(driver->set_access(at, chunk_bytes));
    const unsigned char mine = 0x5A;
    TESSERA_OK(driver->write(at, &mine, 1));
    const ExportedChunk exported = TESSERA_OK(driver->export_chunk(chunk));
    const std::byte header{0};
    TESSERA_OK(send_descriptors(pair.socket, std::span(&header, 1), std::span(&exported.descriptor, 1)));
    close(exported.descriptor);
    auto done = receive_descriptors(pair.socket, 1, 0);
    ASSERT_TRUE(done.ok()) << describe(done.error());
    unsigned char reply = 0;
    TESSERA_OK(driver->read(at + 1, &reply, 1));
    EXPECT_EQ(reply, 0xA5) << "the exporter does not see the importer's write";
    // The exporter lets go of all of it, and its driver goes, as at an exit.
    TESSERA_OK(driver->unmap(at));
    TESSERA_OK(driver->release_chunk(chunk));
    TESSERA_OK(driver->release_reservation(at));
    EXPECT_EQ(driver->census(), DriverCensus{});
  }
  close(pair.socket);  // the importer reads end of file, then its bytes again
  EXPECT_EQ(exit_code(pair.child), 0) << "the importer failed at its step (tests/driver/sharing_processes_test.cpp)";
}

TEST(SharingBetweenProcesses, AnImporterKilledWithSigkillLeavesTheExporterHoldingNothingMore) {
  auto driver = shareable_host();
  ASSERT_TRUE(driver);
  const DriverCensus before = driver->census();
  const Pair pair = start_importer(/*read_after_exporter_exit=*/false);
  ASSERT_GT(pair.child, 0);
  const Address at = TESSERA_OK(driver->reserve(chunk_bytes));
  const ChunkId chunk = TESSERA_OK(driver->create_chunk(chunk_bytes));
  TESSERA_OK(driver->map(at, chunk));
  TESSERA_OK(driver->set_access(at, chunk_bytes));
  const unsigned char mine = 0x5A;
  TESSERA_OK(driver->write(at, &mine, 1));
  const ExportedChunk exported = TESSERA_OK(driver->export_chunk(chunk));
  const std::byte header{0};
  TESSERA_OK(send_descriptors(pair.socket, std::span(&header, 1), std::span(&exported.descriptor, 1)));
  close(exported.descriptor);
  ASSERT_TRUE(receive_descriptors(pair.socket, 1, 0).ok());
  kill(pair.child, SIGKILL);
  EXPECT_EQ(exit_code(pair.child), 128 + SIGKILL);
  close(pair.socket);
  // The exporter keeps no record of importers: what it holds is its own chunk, which goes as any chunk.
  TESSERA_OK(driver->unmap(at));
  TESSERA_OK(driver->release_chunk(chunk));
  TESSERA_OK(driver->release_reservation(at));
  EXPECT_EQ(driver->census(), before);
}

TEST(DescriptorPassing, AMessageWithMoreDescriptorsThanAllowedIsRefusedAndTheyAreClosed) {
  std::array<int, 2> sockets{};
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets.data()), 0);
  const std::array<int, 2> two{sockets[0], sockets[0]};
  const std::byte header{0};
  TESSERA_OK(send_descriptors(sockets[0], std::span(&header, 1), two));
  auto received = receive_descriptors(sockets[1], 8, 1);
  ASSERT_FALSE(received.ok());
  EXPECT_EQ(received.error().code, Errc::invalid_argument);
  EXPECT_NE(received.error().message.find("got 2 descriptors"), std::string::npos) << received.error().message;
  auto empty = send_descriptors(sockets[0], {}, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, Errc::invalid_argument);
  close(sockets[0]);
  auto closed = receive_descriptors(sockets[1], 8, 1);
  ASSERT_FALSE(closed.ok());
  EXPECT_NE(closed.error().message.find("closed"), std::string::npos) << closed.error().message;
  close(sockets[1]);
}

TEST(DescriptorPassing, TakingADescriptorOfAnotherProcessWorksOrSaysWhyNot) {
  const int mine = dup(STDIN_FILENO);
  ASSERT_GE(mine, 0);
  auto taken = take_descriptor(getpid(), mine);  // its own process: no ptrace permission needed
  if (!taken) {
    EXPECT_TRUE(taken.error().code == Errc::unsupported || taken.error().code == Errc::unavailable)
        << describe(taken.error());
    EXPECT_NE(taken.error().message.find("pidfd"), std::string::npos);
  } else {
    EXPECT_NE(*taken, mine);
    close(*taken);
  }
  close(mine);
}

}  // namespace
}  // namespace tessera::testing
