#include <cstdio>

#include <tessera/drivers.hpp>

int main() {
  auto sim = tessera::make_sim_driver();
  if (!sim) return 1;
  auto page = sim->driver->create_chunk(2 * tessera::MiB);
  if (!page) return 2;
  if (!sim->driver->release_chunk(*page)) return 3;
  std::puts("consumer: tessera found and working");
  return 0;
}
