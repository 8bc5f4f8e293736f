/* Tessera's C ABI: the functions PyTorch's CUDAPluggableAllocator and torch_npu's NPUPluggableAllocator load
 * from libtessera_c.so, and C functions for what PyTorch's own memory_stats(), memory_summary() and
 * _dump_snapshot() refuse to give for a pluggable allocator. docs/pytorch.md is the guide.
 *
 * One allocator per device, created on the first call that needs it. The driver is chosen once per process,
 * when the first allocator is created, from (first that applies):
 *   1. tessera_configure(driver, ...);
 *   2. the environment variable TESSERA_DRIVER: cuda, ascend, host or sim;
 *   3. the entry point: tessera_alloc and its hooks use cuda, tessera_npu_alloc and its hooks use ascend.
 * The allocator's configuration comes from tessera_configure or TESSERA_ALLOC_CONF (`key:value,...`,
 * docs/allocator.md). Other environment variables: TESSERA_CAPACITY (host and sim drivers: the device's
 * capacity, e.g. "8GiB"; default 1 GiB for host, 80 GiB for sim; a whole number of 2 MiB granules, at most
 * 16 TiB with virtual_factor 2, 32 TiB / virtual_factor in general, so that the address space the allocator
 * reserves fits: docs/pytorch.md), TESSERA_CUDA_LIBRARY and
 * TESSERA_ASCEND_LIBRARY (the platform library to load instead of libcuda.so.1 and libascendcl.so),
 * TESSERA_SHAREABLE=1 (host and cuda drivers: memory another process can import; "Sharing a live block").
 *
 * Errors ("Errors" below says more): every function records on the calling thread whether it failed, void
 * ones included. A failure also returns NULL (the allocation functions and those that return a string) or -1
 * (those that return an int); tessera_last_error_code() gives its kind and tessera_last_error() a message
 * that names what is wrong. No function aborts, and none throws but tessera_torch_alloc and
 * tessera_torch_npu_alloc, which throw a C++ std::runtime_error for PyTorch instead of returning NULL. Every
 * function is thread-safe.
 *
 * Strings returned by tessera_* functions belong to the library: each stays valid on the calling thread
 * until the next call of the same function on that thread (tessera_last_error's: of any function). */
#ifndef TESSERA_C_H
#define TESSERA_C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(TESSERA_C_BUILDING)
#define TESSERA_C_API __attribute__((visibility("default")))
#else
#define TESSERA_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- PyTorch's CUDAPluggableAllocator (torch >= 2.0):
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "tessera_torch_alloc", "tessera_free")
 *   torch.cuda.memory.change_current_allocator(alloc)       -- before the first CUDA allocation
 * `stream` is the cudaStream_t the memory is for. tessera.torch.enable() does this (docs/pytorch.md). */

/* At least `size` bytes on `device` for work on `stream`. size 0: NULL, and no error is set. Failure (out of
 * memory, no driver, a bad configuration): NULL and a message (tessera_last_error). */
TESSERA_C_API void* tessera_alloc(size_t size, int device, void* stream);
/* As tessera_alloc, but a failure throws a C++ std::runtime_error carrying the message instead of returning
 * NULL (the code and message are recorded as well): the function to give PyTorch, which does not check the
 * result of a pluggable allocator for NULL (a NULL would become a tensor at address 0) but turns an exception
 * into a Python RuntimeError. Out of memory reads "CUDA out of memory. ..." as PyTorch's own message begins, so
 * that code looking for it finds it; it is a std::runtime_error all the same (PyTorch's c10::OutOfMemoryError
 * would need libc10, which this library does not link). Callable from C++ only. */
TESSERA_C_API void* tessera_torch_alloc(size_t size, int device, void* stream);
/* Frees memory from tessera_alloc. NULL is ignored. A pointer this library did not hand out on `device`
 * changes nothing and fails with TESSERA_ERROR_NOT_FOUND (it is counted as "tessera.bad_frees"), one of another
 * device's with TESSERA_ERROR_INVALID_ARGUMENT, as does a device out of range; the message says which. `size`
 * is not needed. */
TESSERA_C_API void tessera_free(void* ptr, size_t size, int device, void* stream);
/* Optional hooks (CUDAPluggableAllocator.set_init_fn, set_reset_fn, set_memory_fraction_fn,
 * set_record_stream_fn). init creates nothing: allocators are created on first use; it checks the driver and
 * the configuration, and fails (the code says so) when they are bad. */
TESSERA_C_API void tessera_init(int device_count);
/* Gives every cached, unused page of every device back to the driver (torch.cuda.empty_cache). Every device
 * is tried; the first failure is the one recorded. */
TESSERA_C_API void tessera_empty_cache(void);
/* The allocator of `device` may hold at most `fraction` (0 < fraction <= 1) of the device's memory; another
 * fraction fails with TESSERA_ERROR_INVALID_ARGUMENT and changes nothing. */
TESSERA_C_API void tessera_set_memory_fraction(double fraction, int device);
/* Work on `stream` uses `ptr` too: its reuse by another stream waits for that work as well. A pointer that is
 * no live block of any device fails with TESSERA_ERROR_NOT_FOUND. NULL is ignored. */
TESSERA_C_API void tessera_record_stream(void* ptr, void* stream);

/* ---- torch_npu's NPUPluggableAllocator: the same functions with aclrtStream, on the ascend driver by
 * default. Untested on Ascend hardware (docs/pytorch.md). */
TESSERA_C_API void* tessera_npu_alloc(size_t size, int device, void* stream);
/* As tessera_torch_alloc, for torch_npu: throws, "NPU out of memory. ..." when out of memory. */
TESSERA_C_API void* tessera_torch_npu_alloc(size_t size, int device, void* stream);
TESSERA_C_API void tessera_npu_free(void* ptr, size_t size, int device, void* stream);
TESSERA_C_API void tessera_npu_init(int device_count);
TESSERA_C_API void tessera_npu_empty_cache(bool check_error); /* set_reset_fn takes void(bool) on NPU */
TESSERA_C_API void tessera_npu_set_memory_fraction(double fraction, int device);
TESSERA_C_API void tessera_npu_record_stream(void* ptr, void* stream);

/* NPUPluggableAllocator's statistics hooks (set_get_device_stats_fn, set_reset_peak_status_fn), through
 * which torch_npu.npu.memory_stats(), max_memory_reserved() and memory_summary() read Tessera's figures.
 * tessera_npu_device_stats is laid out as torch_npu's c10_npu::NPUCachingAllocator::DeviceStats
 * (torch_npu/csrc/core/npu/NPUCachingAllocator.h, torch_npu v2.7.1, whose NPUPluggableAllocator takes these
 * hooks): Stat is {int64 current, peak, allocated, freed}; each StatArray is 3 Stats indexed
 * aggregate, small_pool, large_pool. Untested against torch_npu itself (docs/pytorch.md). torch_npu's
 * set_snapshot_fn hook returns a C++ SnapshotInfo (std::vector members): a C function cannot be it, and
 * Tessera offers none. */
enum { TESSERA_NPU_STAT_AGGREGATE = 0, TESSERA_NPU_STAT_SMALL_POOL = 1, TESSERA_NPU_STAT_LARGE_POOL = 2 };
typedef struct tessera_npu_stat {
  int64_t current;
  int64_t peak;      /* since the start or the last peak reset */
  int64_t allocated; /* added since the start */
  int64_t freed;     /* removed since the start */
} tessera_npu_stat;
typedef struct tessera_npu_device_stats {
  tessera_npu_stat allocation[3];           /* live blocks */
  tessera_npu_stat segment[3];              /* pages held from the device (aggregate only) */
  tessera_npu_stat active[3];               /* = allocation: a block is active from alloc to the caller's free */
  tessera_npu_stat inactive_split[3];       /* 0: no free block pins memory in Tessera */
  tessera_npu_stat allocated_bytes[3];      /* live bytes after rounding */
  tessera_npu_stat reserved_bytes[3];       /* physical bytes held from the device (aggregate only) */
  tessera_npu_stat active_bytes[3];         /* = allocated_bytes */
  tessera_npu_stat inactive_split_bytes[3]; /* 0 */
  tessera_npu_stat requested_bytes[3];      /* live bytes as asked */
  int64_t num_alloc_retries;
  int64_t num_ooms;
  tessera_npu_stat oversize_allocations; /* 0: Tessera has no max_split_size */
  tessera_npu_stat oversize_segments;    /* 0 */
  int64_t max_split_size;                /* 0 */
} tessera_npu_device_stats;
/* The statistics of `device` (all zero before its first allocation, and for a device out of range, which
 * fails with TESSERA_ERROR_INVALID_ARGUMENT). The function for set_get_device_stats_fn: DeviceStats(*)(int). */
TESSERA_C_API tessera_npu_device_stats tessera_npu_get_device_stats(int device);
/* tessera_reset_peak_memory_stats without a result: the function for set_reset_peak_status_fn, void(*)(int). */
TESSERA_C_API void tessera_npu_reset_peak_stats(int device);

/* ---- Configuration. */

/* Chooses the driver ("cuda", "ascend", "host", "sim"; NULL: as above) and the allocator's configuration
 * (TESSERA_ALLOC_CONF's syntax; NULL: from TESSERA_ALLOC_CONF) for the allocators not created yet, and
 * checks both now. -1 with a message naming the problem: an unknown driver, a bad configuration key or
 * value, a driver that contradicts TESSERA_DRIVER, or allocators already created with other settings. */
TESSERA_C_API int tessera_configure(const char* driver, const char* alloc_conf);
/* The driver in use ("" before the first allocator exists, and on failure: the code tells them apart). */
TESSERA_C_API const char* tessera_driver_name(void);
/* 1 when the allocator of `device` exists, else 0; -1 and a message for a device out of range (below 0, or
 * 64 and above). */
TESSERA_C_API int tessera_has_allocator(int device);
TESSERA_C_API const char* tessera_version(void);

/* ---- Sharing a live block with another process on the same machine (docs/allocator.md, "Sharing a block
 * with another process"; docs/pytorch.md, "IPC"). The driver must share chunks: set TESSERA_SHAREABLE=1 in the
 * environment before the device's allocator is created (the host and cuda drivers then make every chunk
 * importable; the host driver no longer survives fork()).
 *
 * tessera_export: the block that starts at `ptr` on `device`, exported: a handle (a versioned byte string of
 * at most a few KiB, written to `handle`, its length to *handle_size) and one descriptor per chunk under the
 * block, then one that tells an importer whether this process's allocator is still there (written to
 * `descriptors`, their count to *descriptor_count), which are the caller's: send them with
 * the handle, then close them. The block must lie on whole granules (allocate a multiple of 2 MiB); from now
 * on its tag cannot be paused, and at its free its pages are never reused for another block. 0 on success; -1
 * and a message: not a live block (NOT_FOUND), a block that shares a granule, or buffers too small — the
 * sizes needed are written all the same — (INVALID_ARGUMENT), a driver that cannot share (UNSUPPORTED).
 * tessera_import: maps a block another process exported at addresses of this process, with access: its first
 * byte, or NULL and a message (a handle that is not one, truncated, of another version, whose sizes do not add
 * up, or whose descriptors do not match, or a stale one — its exporting process exited, or destroyed its
 * allocator, before the import (a child of fork() does not keep its parent's exports live) —:
 * INVALID_ARGUMENT, naming what is wrong; nothing is kept). A block freed by its exporter
 * since the export still imports, with its bytes as they were at the free. The
 * descriptors stay the caller's (close them after). tessera_close_import unmaps it (after a device-wide
 * synchronize) and gives back what the import took; an address that is no import is NOT_FOUND.
 * tessera_send_handle / tessera_receive_handle: a handle and its descriptors in one message over a connected
 * Unix socket (SCM_RIGHTS); a message larger than the capacities given is refused and its descriptors closed.
 * tessera_take_descriptor: a duplicate of descriptor `descriptor` of process `pid` (pidfd_getfd, Linux 5.6+,
 * needing ptrace permission over it), or -1 and a message (UNSUPPORTED, UNAVAILABLE): then use the socket. */
TESSERA_C_API int tessera_export(int device, void* ptr, void* handle, size_t handle_capacity, size_t* handle_size,
                                 int* descriptors, size_t descriptor_capacity, size_t* descriptor_count);
TESSERA_C_API void* tessera_import(int device, const void* handle, size_t handle_size, const int* descriptors,
                                   size_t descriptor_count);
TESSERA_C_API int tessera_close_import(int device, void* ptr);
TESSERA_C_API int tessera_send_handle(int socket, const void* handle, size_t handle_size, const int* descriptors,
                                      size_t descriptor_count);
TESSERA_C_API int tessera_receive_handle(int socket, void* handle, size_t handle_capacity, size_t* handle_size,
                                         int* descriptors, size_t descriptor_capacity, size_t* descriptor_count);
TESSERA_C_API int tessera_take_descriptor(int pid, int descriptor);

/* ---- Pausing memory by tag (docs/allocator.md, "Pausing a tag"), in torch_memory_saver's and vLLM sleep
 * mode's use: an RL job pauses its inference engine's memory while it trains, with every address kept.
 *
 * Allocations on this thread carry the innermost open tag, else "default". push_tag opens `tag` (NULL or
 * "": the default tag); pop_tag closes the innermost (when none is open it closes nothing and fails with
 * TESSERA_ERROR_NOT_FOUND). A tag is at most 255 bytes
 * of valid UTF-8 with no NUL or other control byte: push_tag refuses any other name, returning -1 with a
 * message that names the byte, and opens nothing; 0 on success.
 *
 * push_tag_with_backup opens `tag` as push_tag does, and the blocks allocated while it is the innermost
 * open tag are backed up by every pause (torch_memory_saver's enable_cpu_backup): the choice is each
 * block's, made when it is allocated, whatever is opened or paused later. */
TESSERA_C_API int tessera_push_tag(const char* tag);
TESSERA_C_API int tessera_push_tag_with_backup(const char* tag, int enable_cpu_backup);
TESSERA_C_API void tessera_pop_tag(void);
/* Pauses `tag` on `device` (NULL: every tag of its allocator but the default): its pages go back to the
 * device and its blocks keep their addresses. The bytes of its blocks allocated under
 * push_tag_with_backup, and of all its blocks when `backup` is non-zero, are first copied to host memory.
 * Resume maps pages under them again and copies the backups back (without a backup a block's contents are
 * unspecified). 0 on success; -1 and a message naming the tag and what failed, with its code: an unknown tag
 * or a device without an allocator (NOT_FOUND); a refused name, the default tag ("" or "default": it holds
 * every allocation made outside a tag, and is neither paused nor resumed here), a pause with `backup` of a
 * tag already paused without one (its bytes are gone) (INVALID_ARGUMENT); a driver that cannot copy to host
 * memory (UNSUPPORTED); out of memory on resume (OUT_OF_MEMORY: the tag stays paused with its backups; resume
 * again once memory is free). With tag NULL every tag is tried, and the first failure is the one recorded. */
TESSERA_C_API int tessera_pause(int device, const char* tag, int backup);
TESSERA_C_API int tessera_resume(int device, const char* tag);
/* The tags the allocator of `device` has allocated under, in the order first used ("default" among them), as
 * a JSON array of objects: {"name": "weights", "paused": false, "allocated_bytes": N, "reserved_bytes": N,
 * "paused_bytes": N, "backup_bytes": N} (the figures as memory_stats_json's "tessera.tag.<name>.*"; a name
 * is UTF-8 and may hold any character a tag may, '.' and '"' among them). "[]" when the device has no
 * allocator; NULL and TESSERA_ERROR_INVALID_ARGUMENT for a device out of range. */
TESSERA_C_API const char* tessera_tags_json(int device);

/* ---- Private pools (docs/pytorch.md, "Private pools"): a pool is named by two integers (PyTorch's
 * MempoolId_t). While a pool is begun, this thread's allocations on `device` go into it, and a freed block of
 * the pool is reused only by allocations into it; several begins of one pool share it. Allocations under a
 * tag (tessera_push_tag) inside a pool carry the tag too: pausing the tag pauses them. `kind` 0 is a graph
 * pool (it keeps every page it was given until released: a CUDA graph replays into its freed blocks too),
 * 1 a plain pool (its idle pages may be reclaimed like the shared cache's). Releasing takes one begin's use
 * away; the last releases the pool, and its cached memory goes back to the shared cache. 0 on success; -1 and
 * a message naming the pool: id (0, 0) or a kind other than 0 or 1 (INVALID_ARGUMENT), an end without a
 * begin or a release of no pool (NOT_FOUND), a release while it is still begun (INVALID_ARGUMENT).
 * PyTorch's CUDA graph hooks, with their C++ types, are in tessera_torch_hooks.hpp. */
TESSERA_C_API int tessera_pool_begin(int device, uint64_t id_first, uint64_t id_second, int kind);
TESSERA_C_API int tessera_pool_end(int device, uint64_t id_first, uint64_t id_second);
TESSERA_C_API int tessera_pool_release(int device, uint64_t id_first, uint64_t id_second);
/* Graph capture without the hooks (PyTorch before 2.3, whose CUDAPluggableAllocator cannot take them): `on`
 * non-zero refuses every allocation (tessera_alloc, tessera_torch_alloc and the npu ones) on a stream that is
 * capturing a graph, because its memory would come from the shared cache, and eager tensors could later be
 * given memory the graph replays into. The allocation then fails with TESSERA_ERROR_UNSUPPORTED and a message
 * naming the stream and PyTorch 2.3; when the driver cannot tell whether the stream is capturing, with its
 * error (a libcuda without cuStreamIsCapturing: UNSUPPORTED). Only the cuda driver can tell: others' streams
 * never capture (ascend's may, unchecked). On, each allocation asks the driver (cuStreamIsCapturing); off (the
 * default), it costs one relaxed atomic load. Process-wide, and meant for where the hooks are not installed: it
 * refuses a capture into a begun pool too. tessera.torch.enable("cuda") turns it on where it cannot install
 * them. 0 (0 turns it off). */
TESSERA_C_API int tessera_refuse_graph_capture(int on);

/* ---- torch.cuda.MemPool (PyTorch 2.5 and later): segments from Tessera under a tag, for the code inside
 * torch.cuda.use_mem_pool only, the rest of the process staying on PyTorch's own allocator (vLLM's and
 * torch_memory_saver's shape). tessera.torch.mem_pool() builds it:
 *   slot = tessera_mem_pool_slot("kv_cache", 0)
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "tessera_mem_pool_alloc_<slot>", "tessera_free")
 *   pool = torch.cuda.MemPool(alloc.allocator())
 * A slot is one of TESSERA_MEM_POOL_SLOTS allocation functions, each allocating as tessera_torch_alloc does,
 * under the slot's tag (NULL or "": the default tag) and, where enable_cpu_backup is non-zero, backed up at
 * every pause. The same tag and backup choice give the same slot. -1 and INVALID_ARGUMENT for a refused tag
 * name or when every slot holds another tag. */
#define TESSERA_MEM_POOL_SLOTS 8
TESSERA_C_API int tessera_mem_pool_slot(const char* tag, int enable_cpu_backup);
TESSERA_C_API void* tessera_mem_pool_alloc_0(size_t size, int device, void* stream);
TESSERA_C_API void* tessera_mem_pool_alloc_1(size_t size, int device, void* stream);
TESSERA_C_API void* tessera_mem_pool_alloc_2(size_t size, int device, void* stream);
TESSERA_C_API void* tessera_mem_pool_alloc_3(size_t size, int device, void* stream);
TESSERA_C_API void* tessera_mem_pool_alloc_4(size_t size, int device, void* stream);
TESSERA_C_API void* tessera_mem_pool_alloc_5(size_t size, int device, void* stream);
TESSERA_C_API void* tessera_mem_pool_alloc_6(size_t size, int device, void* stream);
TESSERA_C_API void* tessera_mem_pool_alloc_7(size_t size, int device, void* stream);

/* ---- Errors.
 *
 * Per thread, like errno, but never stale: every tessera_* function except the four below first sets the
 * calling thread's code to TESSERA_OK, and a failure then sets the code and the message. So after any call,
 * tessera_last_error_code() on the same thread tells whether that call failed — void calls included — and
 * tessera_last_error() is that call's message, or "" when it succeeded. Calls on other threads change
 * neither. The four error functions read or clear the state and change nothing else; they never fail.
 *
 * The values of tessera_error_code are part of the ABI: a code keeps its number forever and new codes are
 * only appended, so a caller should treat a code it does not know as a failure of an unknown kind. */
typedef enum tessera_error_code {
  TESSERA_OK = 0,                        /* the call succeeded */
  TESSERA_ERROR_OUT_OF_MEMORY = 1,       /* no room on the device (its capacity, memory fraction or a paused tag) */
  TESSERA_ERROR_INVALID_ARGUMENT = 2,    /* an argument or setting that breaks the call's contract: a device out
                                            of range, a refused tag name, a bad configuration or driver name */
  TESSERA_ERROR_NOT_FOUND = 3,           /* no such thing: a pointer that is no live block, an unknown tag, a device
                                            without an allocator, no tag open to pop */
  TESSERA_ERROR_NOT_MAPPED = 4,          /* the driver found a range unmapped that should be mapped */
  TESSERA_ERROR_ALREADY_MAPPED = 5,      /* the driver found a range mapped that should be free */
  TESSERA_ERROR_STILL_MAPPED = 6,        /* the driver refused to release memory that still has mappings */
  TESSERA_ERROR_MAP_LIMIT = 7,           /* the operating system's limit on mappings (vm.max_map_count) */
  TESSERA_ERROR_UNAVAILABLE = 8,         /* the platform library or device is missing, or unusable after fork() */
  TESSERA_ERROR_UNSUPPORTED = 9,         /* the driver lacks what the call needs */
  TESSERA_ERROR_PLATFORM = 10,           /* another failure the platform (CUDA, ACL, the OS) reported */
  TESSERA_ERROR_HOST_OUT_OF_MEMORY = 11, /* host memory ran out inside the library (a std::bad_alloc) */
  TESSERA_ERROR_INTERNAL = 12            /* an unexpected exception inside the library: a bug to report */
} tessera_error_code;

/* The code of the most recent call on this thread: TESSERA_OK when it succeeded. An int, so that a code added
 * later passes through. */
TESSERA_C_API int tessera_last_error_code(void);
/* The message of the most recent call on this thread when it failed; "" when it succeeded. Valid until the
 * next tessera_* call on this thread. */
TESSERA_C_API const char* tessera_last_error(void);
/* The message of the most recent failure on any thread, kept until a newer failure or tessera_clear_error: a
 * diagnostic for failures on threads the caller does not own (PyTorch may allocate on threads of its own). It
 * says nothing about whether a given call failed — read tessera_last_error_code() on the calling thread — and
 * nothing in the library or its Python package reports an error from it. */
TESSERA_C_API const char* tessera_last_error_any_thread(void);
/* This thread's code becomes TESSERA_OK, its message and the process's "". */
TESSERA_C_API void tessera_clear_error(void);

/* ---- Statistics, in PyTorch's vocabulary (memory_stats() keys in brackets). Peaks are since the start or
 * the last tessera_reset_peak_memory_stats. */
typedef struct tessera_memory_stats {
  uint64_t allocated_bytes;        /* [allocated_bytes.all.current] live bytes after rounding */
  uint64_t allocated_bytes_peak;   /* [allocated_bytes.all.peak] */
  uint64_t requested_bytes;        /* [requested_bytes.all.current] live bytes as asked */
  uint64_t requested_bytes_peak;   /* [requested_bytes.all.peak] */
  uint64_t reserved_bytes;         /* [reserved_bytes.all.current] physical bytes held from the device */
  uint64_t reserved_bytes_peak;    /* [reserved_bytes.all.peak] */
  uint64_t allocations;            /* [allocation.all.current] live blocks */
  uint64_t allocations_peak;       /* [allocation.all.peak] */
  uint64_t allocations_total;      /* [allocation.all.allocated] blocks handed out since the start */
  uint64_t frees_total;            /* [allocation.all.freed] */
  uint64_t num_alloc_retries;      /* [num_alloc_retries] */
  uint64_t num_ooms;               /* [num_ooms] */
  uint64_t num_sync_all_streams;   /* [num_sync_all_streams] */
  uint64_t num_device_alloc;       /* [num_device_alloc] physical allocations: chunks created (PyTorch: cudaMalloc calls) */
  uint64_t num_device_free;        /* [num_device_free] chunks released (PyTorch: cudaFree calls) */
  /* Tessera's own. */
  uint64_t mapped_bytes;           /* [tessera.mapped_bytes] */
  uint64_t pooled_bytes;           /* [tessera.pooled_bytes] pages held unmapped, ready for reuse */
  uint64_t cached_bytes;           /* [tessera.cached_bytes] mapped under no live block */
  uint64_t pages_mapped;           /* [tessera.pages_mapped] */
  uint64_t pages_unmapped;         /* [tessera.pages_unmapped] */
  uint64_t stitches;               /* [tessera.stitches] */
  uint64_t pages_stitched;         /* [tessera.pages_stitched] */
  uint64_t pages_reclaimed;        /* [tessera.pages_reclaimed] */
  uint64_t syncs;                  /* [tessera.syncs] */
  uint64_t bad_frees;              /* [tessera.bad_frees] frees of pointers the allocator did not own */
  uint64_t capacity;               /* [tessera.capacity] the device's memory, as the driver reports it */
} tessera_memory_stats;

/* Fills `out` for `device`. All zero (and 0 returned) when the device has no allocator yet. */
TESSERA_C_API int tessera_get_memory_stats(int device, tessera_memory_stats* out);
/* The statistics as one JSON object: PyTorch's memory_stats() keys ("allocated_bytes.all.current",
 * "reserved_bytes.all.peak", "allocation.large_pool.allocated", "num_ooms", ...) and Tessera's under
 * "tessera." ("tessera.driver", "tessera.stitches", ...). NULL on failure. */
TESSERA_C_API const char* tessera_memory_stats_json(int device);
/* A text table of the statistics, like torch.cuda.memory_summary(). NULL on failure. */
TESSERA_C_API const char* tessera_memory_summary(int device);
/* Every peak of `device` (bytes and counts, allocated, requested and reserved) starts again from the current
 * value, as torch.cuda.reset_peak_memory_stats. 0; -1 and a message for a device out of range. */
TESSERA_C_API int tessera_reset_peak_memory_stats(int device);

/* ---- Allocation history and snapshots (torch.cuda.memory._record_memory_history / _dump_snapshot). */

/* Records the newest `max_entries` allocs and frees on every device, present and future; 0 stops and
 * forgets. */
TESSERA_C_API int tessera_record_memory_history(size_t max_entries);
/* Writes the history and the current segments of `device` as a PyTorch snapshot file (a pickle that
 * pytorch.org/memory_viz opens; gzip when the path ends in ".gz"): the recorded allocs and frees, the pages mapped
 * and unmapped between them as segment entries, and as segments the memory mapped now and the page pool. Without
 * a history and without a live block it is the segments alone and no event. -1 when the device has no
 * allocator. */
TESSERA_C_API int tessera_dump_snapshot(const char* path, int device);

/* The stack of each allocation the history records, as PyTorch's history files its frames (the Python
 * package's record_memory_history(stacks="python") installs one). Before each allocation, while a history
 * records, on the allocating thread and outside every lock of Tessera's: `ready()` (when not NULL) says
 * whether `capture` may run on this thread now, by returning anything but NULL (Python passes
 * PyGILState_GetThisThreadState: the thread has an interpreter state), and then `capture(buffer, capacity)`
 * writes the frames, innermost first, one a line, "filename\tline\tname\n", at most `capacity` bytes, and
 * returns the bytes written (0 or less: no stack). `capture` NULL stops; off, an allocation pays one relaxed
 * atomic load. Applies to every device, present and future. 0. */
typedef const void* (*tessera_stack_ready_fn)(void);
typedef int (*tessera_stack_capture_fn)(char* buffer, size_t capacity);
TESSERA_C_API int tessera_set_history_stacks(tessera_stack_capture_fn capture, tessera_stack_ready_fn ready);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_C_H */
