// steptrace capture shim for libtorch. Built by `steptrace capture` on first use against the
// program's own torch (CMake via torch.utils.cmake_prefix_path), cached by torch version and
// source hash.
//
// Always: a global RecordFunction callback that opens an NVTX range per op, named
// "<op> seq=<sequence number>" and nested as the dispatcher nests ops, so an Nsight Systems
// timeline lines up with analyze's nodes. Python programs load this library with
// torch.ops.load_library; C++ programs get it through LD_PRELOAD.
//
// With STEPTRACE_NATIVE=1 (a C++ program), it also captures: CUDA memory history from start-up,
// the Kineto profiler on the main thread from start-up to exit, and step boundaries, found as
// the first top-level main-thread op run with grad mode on and an autograd sequence number
// after an autograd backward pass (the optimizer runs under no_grad, the next forward's input
// copy does not), or from an explicit
// RECORD_USER_SCOPE("steptrace::step"). The launcher trims the saved trace to the schedule's
// active window using the boundaries written to steps*.json. Profiler state is only changed
// at start-up and at exit: changing it from inside a RecordFunction callback is not safe.

#include <ATen/record_function.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <torch/csrc/profiler/standalone/execution_trace_observer.h>
#include <torch/version.h>
#include <nvtx3/nvToolsExt.h>

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string env(const char* name, const char* dflt = "") {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string(dflt);
}

bool recording(const std::string& what) {
  std::string rec = "," + env("STEPTRACE_RECORD", "trace,memory,et,nvtx") + ",";
  return rec.find("," + what + ",") != std::string::npos;
}

int64_t now_epoch_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- NVTX per op ----------------------------------------------------------------------------

bool g_nvtx = false;

std::unique_ptr<at::ObserverContext> nvtx_start(const at::RecordFunction& fn) {
  std::string name = fn.name();
  if (fn.seqNr() >= 0) {
    name += " seq=" + std::to_string(fn.seqNr());
  }
  nvtxRangePushA(name.c_str());
  return nullptr;
}

void nvtx_end(const at::RecordFunction&, at::ObserverContext*) { nvtxRangePop(); }

// ---- native capture -------------------------------------------------------------------------

struct Native {
  bool enabled = false;
  std::string out;
  std::string suffix;
  std::thread::id main_thread;
  std::atomic<bool> backward_seen{false};
  std::atomic<bool> explicit_marker{false};
  std::mutex mu;
  std::vector<int64_t> boundaries;  // epoch ns of each step boundary
  std::vector<std::string> errors;
  std::string method = "backward_cycle";
  bool profiler_on = false;
  bool memory_on = false;
  bool et_on = false;
  std::atomic<bool> finished{false};
  std::atomic<bool> atexit_late{false};
};

Native g;
thread_local int t_depth = 0;

void finish_at_exit();

void mark_boundary(bool is_explicit) {
  std::lock_guard<std::mutex> lock(g.mu);
  g.boundaries.push_back(now_epoch_ns());
  if (is_explicit) g.method = "explicit";
  // For programs that call exit() rather than return from main.
  if (!g.atexit_late.exchange(true)) std::atexit(finish_at_exit);
}

std::unique_ptr<at::ObserverContext> native_start(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (fn.scope() == at::RecordScope::USER_SCOPE && std::string(name) == "steptrace::step") {
    g.explicit_marker = true;
    mark_boundary(true);
    return nullptr;
  }
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION ||
      std::string(name).rfind("autograd::engine::evaluate_function", 0) == 0) {
    g.backward_seen = true;
  }
  if (std::this_thread::get_id() == g.main_thread) {
    // Reading a loss for logging (`loss.item()`) after the optimizer is not the next forward.
    static const std::set<std::string> reads{"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"};
    if (t_depth == 0 && !g.explicit_marker && g.backward_seen &&
        fn.scope() == at::RecordScope::FUNCTION && fn.seqNr() >= 0 && at::GradMode::is_enabled() &&
        reads.count(name) == 0) {
      g.backward_seen = false;
      mark_boundary(false);
    }
    t_depth++;
  }
  return nullptr;
}

void native_end(const at::RecordFunction&, at::ObserverContext*) {
  if (std::this_thread::get_id() == g.main_thread && t_depth > 0) t_depth--;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      o += ' ';
      continue;
    }
    o += c;
  }
  return o;
}

void write_status(bool cleanly) {
  std::ofstream f(g.out + "/shim" + g.suffix + ".json");
  std::lock_guard<std::mutex> lock(g.mu);
  f << "{\n \"native\": true,\n \"torch\": \"" << TORCH_VERSION << "\",\n \"boundary\": \"" << g.method
    << "\",\n \"steps\": " << g.boundaries.size() << ",\n \"boundaries_epoch_ns\": [";
  for (size_t i = 0; i < g.boundaries.size(); i++) f << (i ? ", " : "") << g.boundaries[i];
  f << "],\n \"memory_history\": " << (g.memory_on ? "true" : "false")
    << ",\n \"exited_cleanly\": " << (cleanly ? "true" : "false") << ",\n \"files\": {";
  bool first = true;
  if (g.profiler_on) {
    f << "\"trace_full\": \"trace_full" << g.suffix << ".json\"";
    first = false;
  }
  if (g.memory_on) {
    f << (first ? "" : ", ") << "\"snapshot_exit\": \"snapshot_exit" << g.suffix << ".pickle\"";
    first = false;
  }
  if (g.et_on) f << (first ? "" : ", ") << "\"exec_trace_full\": \"exec_trace_full" << g.suffix << ".json\"";
  f << "},\n \"errors\": [";
  for (size_t i = 0; i < g.errors.size(); i++) f << (i ? ", " : "") << "\"" << json_escape(g.errors[i]) << "\"";
  f << "]\n}\n";
}

// Called when main returns: the profiler's thread-local state and CUDA are still alive.
void finish() {
  if (g.finished.exchange(true)) return;
  namespace tap = torch::autograd::profiler;
  if (g.profiler_on) {
    try {
      auto result = tap::disableProfiler();
      if (result) result->save(g.out + "/trace_full" + g.suffix + ".json");
    } catch (const std::exception& e) {
      g.errors.push_back(std::string("profiler: ") + e.what());
      g.profiler_on = false;
    }
  }
  if (g.et_on) {
    try {
      torch::profiler::impl::disableExecutionTraceObserver();
      torch::profiler::impl::removeExecutionTraceObserver();  // closes the JSON
    } catch (const std::exception& e) {
      g.errors.push_back(std::string("execution trace: ") + e.what());
      g.et_on = false;
    }
  }
  if (g.memory_on) {
    try {
      auto snap = torch::cuda::_memory_snapshot_pickled();
      std::ofstream(g.out + "/snapshot_exit" + g.suffix + ".pickle", std::ios::binary)
          .write(snap.data(), snap.size());
    } catch (const std::exception& e) {
      g.errors.push_back(std::string("snapshot: ") + e.what());
      g.memory_on = false;
    }
  }
  write_status(true);
}

// Called from exit handlers when the program called exit() instead of returning from main:
// thread-local state (the profiler's) is already destroyed, so only the status is written.
void finish_at_exit() {
  if (g.finished.exchange(true)) return;
  g.errors.push_back("the program called exit() instead of returning from main: trace and snapshot not saved");
  g.profiler_on = false;
  g.memory_on = false;
  g.et_on = false;
  write_status(false);
}

void start_native() {
  g.out = env("STEPTRACE_OUT");
  if (g.out.empty()) return;
  std::string rank = env("RANK");
  g.suffix = rank.empty() ? "" : "_rank" + rank;
  g.main_thread = std::this_thread::get_id();
  g.enabled = true;
  if (recording("memory")) {
    try {
      // context "alloc": see measured-facts (the default breaks checkpointed backward).
      torch::cuda::_record_memory_history(std::optional<std::string>("all"),
                                          std::optional<std::string>("alloc"), "all",
                                          std::stoul(env("STEPTRACE_MAX_ENTRIES", "1000000")));
      g.memory_on = true;
    } catch (const std::exception& e) {
      g.errors.push_back(std::string("record_memory_history: ") + e.what());
    }
  }
  if (recording("trace")) {
    try {
      namespace tpi = torch::profiler::impl;
      namespace tap = torch::autograd::profiler;
      tpi::ProfilerConfig cfg(tpi::ProfilerState::KINETO, /*report_input_shapes=*/true,
                              /*profile_memory=*/true, /*with_stack=*/false, /*with_flops=*/false,
                              /*with_modules=*/false);
      std::set<tpi::ActivityType> acts{tpi::ActivityType::CPU, tpi::ActivityType::CUDA};
      tap::prepareProfiler(cfg, acts);
      tap::enableProfiler(cfg, acts);
      g.profiler_on = true;
    } catch (const std::exception& e) {
      g.errors.push_back(std::string("profiler: ") + e.what());
    }
  }
  if (recording("et")) {
    try {
      // Whole run, like the trace; the launcher keeps the nodes of the ops the cut trace keeps
      // (joined by record function id).
      if (torch::profiler::impl::addExecutionTraceObserver(g.out + "/exec_trace_full" + g.suffix + ".json")) {
        torch::profiler::impl::enableExecutionTraceObserver();
        g.et_on = true;
      }
    } catch (const std::exception& e) {
      g.errors.push_back(std::string("execution trace: ") + e.what());
    }
  }
  at::addGlobalCallback(at::RecordFunctionCallback(native_start, native_end)
                            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                     at::RecordScope::USER_SCOPE}));
  write_status(false);
}

void register_nvtx() {
  if (!recording("nvtx")) return;
  at::addGlobalCallback(at::RecordFunctionCallback(nvtx_start, nvtx_end)
                            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                     at::RecordScope::USER_SCOPE}));
}

// Python programs load the shim with torch.ops.load_library, after torch is up: register at
// load time. A C++ program (STEPTRACE_NATIVE=1) is set up from main() instead (below), where
// torch and the program are fully initialised, and finished when main returns, before exit
// handlers tear CUDA down.
struct Init {
  Init() {
    if (env("STEPTRACE_NATIVE") != "1") register_nvtx();
  }
};

Init g_init;

using MainFn = int (*)(int, char**, char**);
MainFn g_real_main = nullptr;

bool is_target_process() {
  // Only the program steptrace launched, not other processes that inherit LD_PRELOAD.
  std::string want = env("STEPTRACE_NATIVE_EXE");
  if (want.empty()) return true;
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return false;
  buf[n] = 0;
  return want == buf;
}

int wrapped_main(int argc, char** argv, char** envp) {
  bool active = env("STEPTRACE_NATIVE") == "1" && is_target_process();
  if (active) {
    register_nvtx();
    start_native();
  }
  int rc = g_real_main(argc, argv, envp);
  if (active) finish();
  return rc;
}

}  // namespace

// Interposed through LD_PRELOAD: runs the program's main inside wrapped_main.
extern "C" int __libc_start_main(MainFn main, int argc, char** argv, void (*init)(void), void (*fini)(void),
                                 void (*rtld_fini)(void), void* stack_end) {
  using Real = int (*)(MainFn, int, char**, void (*)(void), void (*)(void), void (*)(void), void*);
  static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "__libc_start_main"));
  g_real_main = main;
  return real(wrapped_main, argc, argv, init, fini, rtld_fini, stack_end);
}
