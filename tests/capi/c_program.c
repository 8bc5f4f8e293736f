/* tessera_c.h from plain C (C99, -Wpedantic): the header compiles as C, and a C program allocates, frees,
 * reads statistics and tags, and tells a failed void call from a succeeded one, through libtessera_c.so on the
 * host driver. Exit 0 when everything answered as expected. */
#include <stdio.h>
#include <string.h>

#include "tessera/tessera_c.h"

static int fail(const char* what) {
  fprintf(stderr, "c_program: %s: %s\n", what, tessera_last_error());
  return 1;
}

int main(void) {
  tessera_memory_stats stats;
  const char* json;
  char* block;
  int local = 0;
  if (tessera_configure("host", "reclaim:first") != 0) return fail("tessera_configure");
  block = (char*)tessera_alloc(100000, 0, NULL);
  if (block == NULL) return fail("tessera_alloc");
  memset(block, 1, 100000);
  if (tessera_get_memory_stats(0, &stats) != 0) return fail("tessera_get_memory_stats");
  if (stats.allocations != 1 || stats.requested_bytes != 100000) return fail("statistics after one allocation");
  tessera_free(block, 100000, 0, NULL);
  if (tessera_last_error_code() != TESSERA_OK) return fail("a good free's code");
  tessera_free(&local, sizeof local, 0, NULL);
  if (tessera_last_error_code() != TESSERA_ERROR_NOT_FOUND || tessera_last_error()[0] == '\0') {
    return fail("a bad free's code and message");
  }
  tessera_empty_cache();
  if (tessera_last_error_code() != TESSERA_OK || tessera_last_error()[0] != '\0') {
    return fail("a good call after a bad one: OK and no message");
  }
  if (tessera_push_tag("c.tag") != 0) return fail("tessera_push_tag");
  block = (char*)tessera_alloc(1000, 0, NULL);
  tessera_pop_tag();
  if (block == NULL) return fail("tessera_alloc under a tag");
  json = tessera_tags_json(0);
  if (json == NULL || strstr(json, "\"name\":\"c.tag\"") == NULL) return fail("tags JSON");
  tessera_free(block, 1000, 0, NULL);
  json = tessera_memory_stats_json(0);
  if (json == NULL || strstr(json, "\"allocation.all.freed\":2") == NULL) return fail("statistics JSON");
  if (strcmp(tessera_driver_name(), "host") != 0) return fail("driver name");
  printf("tessera %s from C: %s\n", tessera_version(), json);
  return 0;
}
