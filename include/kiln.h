/* kiln.h: the public C API of kiln's core, the one core header clients include (python/ext is
 * one client; examples/c_api.c is another). It gathers:
 *   ir/        dtypes, avals, the KL_PRIMS table and named params, Programs (build, print,
 *              verify, hash, copy; equations own their bodies);
 *   tracer/    the trace stack: binding equations to traces, lifting, leak detection (trace.h);
 *   transforms/ jvp and vjp (ad.h), vmap (batching.h), the named pass pipeline (pipeline.h);
 *   codegen/   Program -> executable for the CPU or a GPU (compile.h);
 *   runtime/   buffers, executables, launches and the device interface (device.h); the TCP
 *              connections between the processes of a multi-process run (collective_net.h);
 *              the profiler's host events (profile.h) and the GPU's activity records (cupti.h).
 *   the one error path (ir/status.h) and the allocation hook tests use (ir/alloc.h).
 * Ownership follows each declaration's comment: "owned" results are the caller's to free
 * (kl_program_free, kl_exec_release, kl_buf_release). Errors come back as a NULL or -1 result
 * with a message in the caller's buffer. */
#ifndef KILN_H
#define KILN_H
#include "../codegen/compile.h"
#include "../ir/alloc.h"
#include "../ir/loc.h"
#include "../ir/program.h"
#include "../ir/status.h"
#include "../runtime/collective_net.h"
#include "../runtime/cupti.h"
#include "../runtime/device.h"
#include "../runtime/profile.h"
#include "../runtime/runtime.h"
#include "../tracer/trace.h"
#include "../transforms/ad.h"
#include "../transforms/batching.h"
#include "../transforms/fuse.h"
#include "../transforms/pipeline.h"
#endif
