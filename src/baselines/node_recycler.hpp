// A memory resource for the models' ordered sets and maps: nodes of one size come back through a free list,
// so that the inserts and erases of every allocate and free make no heap call once the model is warm.
// Single-threaded, like the models. Memory goes back to the heap when the resource is destroyed.
#pragma once

#include <array>
#include <cstddef>
#include <memory_resource>
#include <vector>

namespace tessera::baselines {

class NodeRecycler final : public std::pmr::memory_resource {
 public:
  NodeRecycler() = default;
  NodeRecycler(const NodeRecycler&) = delete;
  NodeRecycler& operator=(const NodeRecycler&) = delete;
  ~NodeRecycler() override {
    for (std::byte* chunk : chunks_) ::operator delete(chunk);
  }

 private:
  static constexpr std::size_t kGrain = 16;              // every node size is rounded up to this
  static constexpr std::size_t kLargestNode = 256;       // larger requests (hash buckets) go to the heap
  static constexpr std::size_t kChunkBytes = 64 * 1024;  // nodes are carved from chunks of this size

  struct FreeNode {
    FreeNode* next;
  };

  void* do_allocate(std::size_t bytes, std::size_t alignment) override {
    if (bytes > kLargestNode || alignment > kGrain) return std::pmr::new_delete_resource()->allocate(bytes, alignment);
    const std::size_t size_class = (bytes + kGrain - 1) / kGrain;
    if (FreeNode* node = free_[size_class]) {
      free_[size_class] = node->next;
      return node;
    }
    const std::size_t size = size_class * kGrain;
    if (left_ < size) {
      chunks_.push_back(static_cast<std::byte*>(::operator new(kChunkBytes)));
      next_ = chunks_.back();
      left_ = kChunkBytes;
    }
    void* node = next_;
    next_ += size;
    left_ -= size;
    return node;
  }

  void do_deallocate(void* pointer, std::size_t bytes, std::size_t alignment) override {
    if (bytes > kLargestNode || alignment > kGrain) {
      std::pmr::new_delete_resource()->deallocate(pointer, bytes, alignment);
      return;
    }
    const std::size_t size_class = (bytes + kGrain - 1) / kGrain;
    free_[size_class] = new (pointer) FreeNode{free_[size_class]};
  }

  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  std::array<FreeNode*, kLargestNode / kGrain + 1> free_{};
  std::vector<std::byte*> chunks_;
  std::byte* next_ = nullptr;
  std::size_t left_ = 0;
};

}  // namespace tessera::baselines
