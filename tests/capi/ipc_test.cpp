// Sharing a live block with another process through the C ABI, on the host driver with TESSERA_SHAREABLE=1:
// two real processes (the handle and descriptors over a Unix socket), writes seen both ways, the importer's
// bytes kept after the exporter frees and reuses; bad and stale handles refused with a message naming what is
// wrong. The importing child uses a device the parent never made (a forked child may not use the parent's
// host driver once its chunks are files of their own).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tessera/tessera_c.h"

namespace {

constexpr size_t block_bytes = 4u << 20;  // two 2 MiB granules
constexpr int exporter_device = 0;
constexpr int importer_device = 7;

struct Handle {
  std::array<unsigned char, 4096> bytes{};
  size_t size = 0;
  std::array<int, 16> descriptors{};
  size_t count = 0;

  void close_descriptors() {
    for (size_t i = 0; i < count; ++i) close(descriptors[i]);
  }
};

class CApiIpc : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TESSERA_SHAREABLE", "1", 1);
    ASSERT_EQ(tessera_configure("host", ""), 0) << tessera_last_error();
  }
};

unsigned char* bytes_of(void* pointer) { return static_cast<unsigned char*>(pointer); }

int export_block(void* block, Handle& handle) {
  return tessera_export(exporter_device, block, handle.bytes.data(), handle.bytes.size(), &handle.size,
                        handle.descriptors.data(), handle.descriptors.size(), &handle.count);
}

// The child: 0 when every step held, 10+ the step that failed.
[[noreturn]] void importer(int socket) {
  Handle handle;
  if (tessera_receive_handle(socket, handle.bytes.data(), handle.bytes.size(), &handle.size, handle.descriptors.data(),
                             handle.descriptors.size(), &handle.count) != 0) {
    _exit(10);
  }
  void* there = tessera_import(importer_device, handle.bytes.data(), handle.size, handle.descriptors.data(), handle.count);
  handle.close_descriptors();
  if (there == nullptr) _exit(11);
  if (bytes_of(there)[0] != 0x5A || bytes_of(there)[block_bytes - 1] != 0x5A) _exit(12);
  bytes_of(there)[1] = 0xA5;
  const unsigned char done = 1;
  if (tessera_send_handle(socket, &done, 1, nullptr, 0) != 0) _exit(13);
  unsigned char gone = 0;
  if (read(socket, &gone, 1) != 0) _exit(14);  // the exporter freed, reused and closed
  if (bytes_of(there)[0] != 0x5A || bytes_of(there)[1] != 0xA5) _exit(15);
  if (tessera_close_import(importer_device, there) != 0) _exit(16);
  _exit(0);
}

TEST_F(CApiIpc, TwoProcessesSeeEachOthersWritesAndTheImporterKeepsItsBytesAfterTheExporterFrees) {
  std::array<int, 2> sockets{};
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets.data()), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(sockets[0]);
    importer(sockets[1]);
  }
  close(sockets[1]);
  void* block = tessera_alloc(block_bytes, exporter_device, nullptr);
  ASSERT_NE(block, nullptr) << tessera_last_error();
  std::memset(block, 0x5A, block_bytes);
  Handle handle;
  ASSERT_EQ(export_block(block, handle), 0) << tessera_last_error();
  EXPECT_GE(handle.count, 1u);
  ASSERT_EQ(tessera_send_handle(sockets[0], handle.bytes.data(), handle.size, handle.descriptors.data(), handle.count),
            0)
      << tessera_last_error();
  handle.close_descriptors();
  unsigned char ack[8];
  size_t ack_size = 0, ack_count = 0;
  ASSERT_EQ(tessera_receive_handle(sockets[0], ack, sizeof ack, &ack_size, nullptr, 0, &ack_count), 0)
      << tessera_last_error();
  EXPECT_EQ(bytes_of(block)[1], 0xA5) << "the exporter does not see the importer's write";
  tessera_free(block, block_bytes, exporter_device, nullptr);
  for (int round = 0; round < 3; ++round) {  // the next blocks must not land on the exported pages
    void* next = tessera_alloc(block_bytes, exporter_device, nullptr);
    ASSERT_NE(next, nullptr) << tessera_last_error();
    std::memset(next, 0x77, block_bytes);
    tessera_free(next, block_bytes, exporter_device, nullptr);
  }
  close(sockets[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the importer failed at a step of importer() in tests/capi/ipc_test.cpp";
}

TEST_F(CApiIpc, ExportRefusalsNameWhatIsWrong) {
  Handle handle;
  int stray = 0;
  EXPECT_EQ(export_block(&stray, handle), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_NOT_FOUND) << tessera_last_error();

  void* small = tessera_alloc(1000, exporter_device, nullptr);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(export_block(small, handle), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tessera_last_error()).find("whole granules"), std::string::npos) << tessera_last_error();
  tessera_free(small, 1000, exporter_device, nullptr);

  void* block = tessera_alloc(block_bytes, exporter_device, nullptr);
  ASSERT_NE(block, nullptr);
  size_t size = 0, count = 0;
  EXPECT_EQ(tessera_export(exporter_device, block, nullptr, 0, &size, nullptr, 0, &count), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT);
  EXPECT_GT(size, 0u) << "the size needed is written";
  EXPECT_GE(count, 1u);
  tessera_free(block, block_bytes, exporter_device, nullptr);
  // A freed block is no longer exported: a handle cannot be made for it.
  EXPECT_EQ(export_block(block, handle), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_NOT_FOUND) << tessera_last_error();

  int nothing = 0;
  EXPECT_EQ(tessera_close_import(importer_device, &nothing), -1);
  EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_NOT_FOUND);
}

TEST_F(CApiIpc, BadHandlesAreRefusedNamingWhatIsWrongAndKeepNothing) {
  void* block = tessera_alloc(block_bytes, exporter_device, nullptr);
  ASSERT_NE(block, nullptr);
  Handle handle;
  ASSERT_EQ(export_block(block, handle), 0) << tessera_last_error();
  auto refused = [&](const void* bytes, size_t size, const int* descriptors, size_t count, const char* words) {
    EXPECT_EQ(tessera_import(importer_device, bytes, size, descriptors, count), nullptr) << words;
    EXPECT_EQ(tessera_last_error_code(), TESSERA_ERROR_INVALID_ARGUMENT) << words;
    EXPECT_NE(std::string(tessera_last_error()).find(words), std::string::npos) << tessera_last_error();
  };
  const char garbage[] = "not a handle at all, but long enough for a header";
  refused(garbage, sizeof garbage, handle.descriptors.data(), handle.count, "TSIP");
  refused(handle.bytes.data(), 12, handle.descriptors.data(), handle.count, "truncated");
  refused(handle.bytes.data(), handle.size - 1, handle.descriptors.data(), handle.count, "truncated");
  std::vector<unsigned char> versioned(handle.bytes.begin(), handle.bytes.begin() + handle.size);
  versioned[4] = 3;
  refused(versioned.data(), versioned.size(), handle.descriptors.data(), handle.count, "version 3");
  refused(handle.bytes.data(), handle.size, handle.descriptors.data(), 0, "descriptors came with it");
  std::vector<unsigned char> oversized(handle.bytes.begin(), handle.bytes.begin() + handle.size);
  oversized[8] = 0xff;  // the block's size, far past its pieces
  oversized[12] = 0xff;
  refused(oversized.data(), oversized.size(), handle.descriptors.data(), handle.count, "its pieces hold");
  const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<int> wrong(handle.descriptors.begin(), handle.descriptors.begin() + handle.count);
  std::fill(wrong.begin(), wrong.end() - 1, null);  // the chunks' wrong, the liveness right
  refused(handle.bytes.data(), handle.size, wrong.data(), wrong.size(), "not a memfd");
  wrong = {handle.descriptors.begin(), handle.descriptors.begin() + handle.count};
  wrong.back() = null;  // the chunks' right, the liveness wrong
  refused(handle.bytes.data(), handle.size, wrong.data(), wrong.size(), "liveness descriptor");
  close(null);
  handle.close_descriptors();
  tessera_free(block, block_bytes, exporter_device, nullptr);
}

}  // namespace
