#include "tessera/driver_decorators.hpp"

namespace tessera {

ForwardingDriver::ForwardingDriver(std::unique_ptr<Driver> inner) : inner_(std::move(inner)) {}

template <class Call>
auto ForwardingDriver::forward(DriverCall kind, Call&& call) -> decltype(call()) {
  const auto start = std::chrono::steady_clock::now();
  if (auto refused = before_call(kind)) {
    after_call(kind, false, std::chrono::steady_clock::now() - start);
    return std::move(*refused);
  }
  auto result = call();
  after_call(kind, result.ok(), std::chrono::steady_clock::now() - start);
  return result;
}

Result<Address> ForwardingDriver::reserve(Bytes size, Bytes alignment) {
  return forward(DriverCall::reserve, [&] { return inner_->reserve(size, alignment); });
}
Result<void> ForwardingDriver::release_reservation(Address base) {
  return forward(DriverCall::release_reservation, [&] { return inner_->release_reservation(base); });
}
Result<ChunkId> ForwardingDriver::create_chunk(Bytes size) {
  return forward(DriverCall::create_chunk, [&] { return inner_->create_chunk(size); });
}
Result<void> ForwardingDriver::release_chunk(ChunkId page) {
  return forward(DriverCall::release_chunk, [&] { return inner_->release_chunk(page); });
}
Result<void> ForwardingDriver::map(Address at, ChunkId page) {
  return forward(DriverCall::map, [&] { return inner_->map(at, page); });
}
Result<void> ForwardingDriver::map_part(Address at, ChunkId page, Bytes offset, Bytes size) {
  return forward(DriverCall::map, [&] { return inner_->map_part(at, page, offset, size); });
}
Result<void> ForwardingDriver::set_access(Address at, Bytes size) {
  return forward(DriverCall::set_access, [&] { return inner_->set_access(at, size); });
}
Result<void> ForwardingDriver::unmap(Address at) {
  return forward(DriverCall::unmap, [&] { return inner_->unmap(at); });
}
Result<EventId> ForwardingDriver::create_event() {
  return forward(DriverCall::create_event, [&] { return inner_->create_event(); });
}
Result<void> ForwardingDriver::record_event(EventId event, StreamId stream) {
  return forward(DriverCall::record_event, [&] { return inner_->record_event(event, stream); });
}
Result<bool> ForwardingDriver::query_event(EventId event) {
  return forward(DriverCall::query_event, [&] { return inner_->query_event(event); });
}
Result<void> ForwardingDriver::synchronize_event(EventId event) {
  return forward(DriverCall::synchronize_event, [&] { return inner_->synchronize_event(event); });
}
Result<void> ForwardingDriver::destroy_event(EventId event) {
  return forward(DriverCall::destroy_event, [&] { return inner_->destroy_event(event); });
}
Result<void> ForwardingDriver::synchronize_stream(StreamId stream) {
  return forward(DriverCall::synchronize_stream, [&] { return inner_->synchronize_stream(stream); });
}
Result<void> ForwardingDriver::synchronize_device() {
  return forward(DriverCall::synchronize_device, [&] { return inner_->synchronize_device(); });
}
Result<void> ForwardingDriver::write(Address at, const void* source, Bytes size) {
  return forward(DriverCall::copy, [&] { return inner_->write(at, source, size); });
}
Result<void> ForwardingDriver::read(Address at, void* destination, Bytes size) {
  return forward(DriverCall::copy, [&] { return inner_->read(at, destination, size); });
}
Result<HostBuffer> ForwardingDriver::allocate_host(Bytes size) {
  return forward(DriverCall::allocate_host, [&] { return inner_->allocate_host(size); });
}
Result<void> ForwardingDriver::free_host(HostBuffer buffer) {
  return forward(DriverCall::free_host, [&] { return inner_->free_host(buffer); });
}
Result<void> ForwardingDriver::copy_to_host(HostBuffer destination, Address source, Bytes size) {
  return forward(DriverCall::copy_to_host, [&] { return inner_->copy_to_host(destination, source, size); });
}
Result<void> ForwardingDriver::copy_to_device(Address destination, HostBuffer source, Bytes size) {
  return forward(DriverCall::copy_to_device, [&] { return inner_->copy_to_device(destination, source, size); });
}

Result<ExportedChunk> ForwardingDriver::export_chunk(ChunkId chunk) {
  return forward(DriverCall::export_chunk, [&] { return inner_->export_chunk(chunk); });
}
Result<ChunkId> ForwardingDriver::import_chunk(int descriptor, Bytes offset, Bytes size) {
  return forward(DriverCall::import_chunk, [&] { return inner_->import_chunk(descriptor, offset, size); });
}

}  // namespace tessera
