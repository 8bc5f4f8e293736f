// Typed results: every driver call returns Result<T>, never throws and never aborts. An Error carries
// Tessera's category, the platform's own code (CUresult, aclError, errno) and a message that names what
// went wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tessera {

enum class Errc : std::uint8_t {
  out_of_memory,     // the device (or a configured capacity) has no room for the request
  invalid_argument,  // a size, alignment or address that breaks the call's contract
  not_found,         // an unknown page, event or reservation
  not_mapped,        // unmap, set_access or data access over a range that is not mapped
  already_mapped,    // map over a range that already holds a mapping
  still_mapped,      // releasing a reservation or page that still has mappings
  map_limit,         // the OS mapping limit (vm.max_map_count) is reached
  unavailable,       // the platform library or device is missing
  unsupported,       // the driver lacks the capability
  platform,          // any other failure reported by the platform
};

std::string_view to_string(Errc code) noexcept;

struct Error {
  Errc code = Errc::platform;
  std::int64_t platform_code = 0;  // CUresult, aclError or errno; 0 when Tessera itself refused
  std::string message;
};

std::string describe(const Error& error);  // "out_of_memory: <message> (platform code N)"

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T held) : state_(std::in_place_index<0>, std::move(held)) {}  // NOLINT: implicit by design
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(state_); }
  Error&& error() && { return std::get<1>(std::move(state_)); }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT

  bool ok() const noexcept { return !failed_; }
  explicit operator bool() const noexcept { return ok(); }
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

 private:
  Error error_;
  bool failed_ = false;
};

inline Error make_error(Errc code, std::string message, std::int64_t platform_code = 0) {
  return Error{code, platform_code, std::move(message)};
}

}  // namespace tessera
