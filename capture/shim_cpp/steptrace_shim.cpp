// steptrace capture shim for libtorch. Built by `steptrace capture` on first use against the
// program's own torch (CMake via torch.utils.cmake_prefix_path), cached by torch version and
// source hash.
//
// NVTX: when an NVTX tool is attached (NVTX_INJECTION64_PATH, which Nsight Systems sets), a
// global RecordFunction callback opens an NVTX range per op, named "<op> seq=<sequence
// number>" and nested as the dispatcher nests ops, so the timeline lines up with analyze's
// nodes. With no tool attached it is not registered: a callback on every op costs time and
// nothing would record the ranges. Python programs load this library with
// torch.ops.load_library; C++ programs get it through LD_PRELOAD.
//
// With STEPTRACE_NATIVE=1 (a C++ program), it also captures, driven by step boundaries that a
// RecordFunction callback finds on the main thread:
//   skip_first steps    CUDA memory history only (from start-up, so every block has a stack)
//   timing phase        STEPTRACE_TIMING_STEPS steps timed by the clock, memory history paused
//   wait                memory history again
//   warmup              the Kineto profiler prepared
//   active window       the Kineto profiler and the Execution Trace observer on
//   window end          trace, Execution Trace and snapshot written; memory history stopped
//   after               the boundary callback removed: the program runs at its own speed,
//                       timed by the start of each backward pass (a callback on autograd
//                       nodes alone), which gives the step time over the rest of the run
// The profiler's state is thread-local to the main thread, so it is changed only there, from
// the callback at the first op of a step (the op that begins the window is not itself in the
// trace). SIGINT/SIGTERM are handled on the main thread at its next op (the window recorded
// so far is written and marked incomplete), with a watcher thread that saves what does not
// need the main thread if that op does not come; a crash saves the same from the watcher.
//
// Step boundaries: after an autograd backward pass, the first top-level main-thread op run
// with grad mode on, once an op has run with grad mode off since that backward (the
// optimizer's update runs under no_grad; in a program that never does so, at once). Reading a
// value (`loss.item()`) is not a step's first op. Programs whose steps hold several such
// points (a GAN's two optimizers) are told apart by the first op's name: after four
// candidates their cycle is found and the point where input data is copied to the device
// (else the first of the cycle) is kept. A program with no boundary within
// STEPTRACE_FALLBACK_S seconds gets a time window of STEPTRACE_FALLBACK_WINDOW_S seconds.
// `RECORD_USER_SCOPE("steptrace::step")` marks boundaries explicitly.

#include <ATen/cuda/CUDAContext.h>
#include <ATen/record_function.h>
#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <torch/csrc/profiler/standalone/execution_trace_observer.h>
#include <torch/version.h>
#include <nvtx3/nvToolsExt.h>

#include "timing_rule.h"

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
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

int64_t env_int(const char* name, int64_t dflt) {
  std::string v = env(name);
  if (v.empty()) return dflt;
  try {
    return std::stoll(v);
  } catch (...) {
    return dflt;
  }
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

enum class Phase { Before, Window, Timing, Finished };

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Before:
      return "before_window";
    case Phase::Window:
      return "window";
    case Phase::Timing:
      return "timing";
    case Phase::Finished:
      return "finished";
  }
  return "?";
}

struct Schedule {
  int64_t skip_first = 1, wait = 1, warmup = 1, active = 3;
};

Schedule parse_schedule(const std::string& text) {
  Schedule s;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    auto eq = part.find('=');
    if (eq == std::string::npos) continue;
    std::string k = part.substr(0, eq);
    int64_t v = 0;
    try {
      v = std::stoll(part.substr(eq + 1));
    } catch (...) {
      continue;
    }
    if (k == "skip_first") s.skip_first = v;
    if (k == "wait") s.wait = v;
    if (k == "warmup") s.warmup = v;
    if (k == "active") s.active = v;
  }
  return s;
}

struct Native {
  std::string out;
  std::string suffix;
  std::thread::id main_thread;
  Schedule sched;
  int64_t timing_steps = 10;
  int64_t timing_settle = 5;  // timed but left out: autotuning and allocator growth settle
  int64_t timing_max_steps = 20;  // caps of a timing phase whose median does not settle
  int64_t timing_max_ns = 10000000000LL;
  bool lockstep = false;  // a distributed run: the timing phase is a fixed length on every rank
  std::string timing_stop;  // why the timing phase ended (timing_stop_rule)
  int gpu_used = -1;        // -1 not known yet; 0: CPU-only program, profiled without CUDA activity
  bool reference = false;
  int64_t fallback_ns = 0;
  int64_t fallback_window_ns = 0;
  int64_t start_ns = 0;

  // Written on the main thread only (the callback), read under `mu` for the status file.
  Phase phase = Phase::Before;
  bool window_complete = false;
  std::string incomplete;
  bool optimizer_mode = false;     // an op ran under no_grad after a backward at least once
  bool nograd_since_backward = false;
  std::vector<std::string> heads;  // first op of each candidate (kept while the cycle is unknown)
  int64_t heads_in_mode = 0;
  std::string anchor;              // first op that begins a step; empty: every candidate
  bool anchor_final = false;
  int64_t window_start_ns = 0;
  int64_t pstep = 0;  // boundaries outside the timing phase: the schedule's steps
  bool timing_started = false;
  bool memory_paused = false;
  at::CallbackHandle callback = 0;

  std::atomic<bool> backward_seen{false};
  std::atomic<bool> explicit_marker{false};
  std::atomic<int> pending_signal{0};
  std::atomic<bool> signal_handled{false};
  std::atomic<bool> saved_by_watcher{false};

  std::mutex mu;  // guards everything below and the status file
  std::vector<int64_t> boundaries;  // epoch ns of each accepted step boundary
  std::vector<int64_t> timing_ns;   // boundaries of the timing phase
  std::vector<int64_t> window_peaks;
  int64_t candidates = 0;
  std::string gpu;
  int64_t gpu_memory_bytes = 0;
  std::vector<std::string> errors;
  std::string method = "backward_cycle";
  std::vector<std::pair<std::string, std::string>> files;
  bool profiler_prepared = false;
  bool profiler_on = false;
  bool memory_on = false;
  bool et_on = false;
  std::atomic<bool> finished{false};
  std::atomic<bool> atexit_late{false};

  // Start of each backward pass (epoch ns), from a callback on autograd nodes alone that stays
  // for the whole run: after the window it times the program's steps at the program's own
  // speed (the launcher counts the passes per step from the timing phase). Guarded by `mu`.
  std::atomic<int64_t> max_seq{-1};
  std::vector<int64_t> pass_ns;
  int64_t after_start_ns = 0;  // the window's files are written: later steps are the program's own
  int64_t window_end_ns = 0;
  int64_t exit_ns = 0;
  // What capture's own work at the window's edges cost the program (ms, by piece, summed):
  // the manifest shows where a captured run's extra time went. Guarded by `mu`.
  std::map<std::string, double> costs_ms;
};

// Readings kept of backward-pass starts: enough for hours of typical steps; the status file
// stays a few MB.
constexpr size_t kMaxPassReadings = 200000;

Native g;
thread_local int t_depth = 0;

void finish_at_exit();

// Times one piece of capture's own work into g.costs_ms[name].
struct Cost {
  const char* name;
  int64_t t0 = now_epoch_ns();
  explicit Cost(const char* n) : name(n) {}
  ~Cost() {
    std::lock_guard<std::mutex> lock(g.mu);
    g.costs_ms[name] += static_cast<double>(now_epoch_ns() - t0) * 1e-6;
  }
};

void error(const std::string& what) {
  std::lock_guard<std::mutex> lock(g.mu);
  g.errors.push_back(what);
}

std::string path_of(const std::string& name, const std::string& ext) {
  return g.out + "/" + name + g.suffix + ext;
}

void add_file(const std::string& role, const std::string& name) {
  std::lock_guard<std::mutex> lock(g.mu);
  for (auto& f : g.files) {
    if (f.first == role) {
      f.second = name;
      return;
    }
  }
  g.files.emplace_back(role, name);
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

template <typename T>
void write_list(std::ostream& f, const std::vector<T>& v) {
  f << "[";
  for (size_t i = 0; i < v.size(); i++) f << (i ? ", " : "") << v[i];
  f << "]";
}

// Written to a temporary name and renamed, so the launcher never reads half a file.
void write_status(bool cleanly) {
  std::lock_guard<std::mutex> lock(g.mu);
  std::string final_path = path_of("shim", ".json");
  std::string tmp = final_path + ".tmp";
  {
    std::ofstream f(tmp);
    // format_version: the shim.json schema (steptrace_formats::shim::FORMAT_VERSION).
    f << "{\n \"format_version\": 1,\n \"native\": true,\n \"torch\": \"" << TORCH_VERSION
      << "\",\n \"boundary\": \"" << g.method
      << "\",\n \"steps\": " << g.boundaries.size() << ",\n \"candidates\": " << g.candidates
      << ",\n \"anchor_op\": \"" << json_escape(g.anchor) << "\",\n \"boundaries_epoch_ns\": ";
    write_list(f, g.boundaries);
    f << ",\n \"timing_ns\": ";
    write_list(f, g.timing_ns);
    f << ",\n \"timing_settle\": " << (g.timing_started ? g.timing_settle : 0);
    f << ",\n \"backward_pass_ns\": ";
    write_list(f, g.pass_ns);
    f << ",\n \"start_ns\": " << g.start_ns;
    if (g.window_start_ns) f << ",\n \"window_start_ns\": " << g.window_start_ns;
    if (g.window_end_ns) f << ",\n \"window_end_ns\": " << g.window_end_ns;
    if (g.after_start_ns)
      f << ",\n \"after_window_start_ns\": " << g.after_start_ns << ",\n \"after_window_start_epoch_ns\": "
        << g.after_start_ns;
    if (g.exit_ns) f << ",\n \"exit_ns\": " << g.exit_ns;
    f << ",\n \"costs_ms\": {";
    bool first_cost = true;
    for (const auto& [k, v] : g.costs_ms) {
      f << (first_cost ? "" : ", ") << "\"" << k << "\": " << v;
      first_cost = false;
    }
    f << "}";
    if (!g.timing_stop.empty()) f << ",\n \"timing_stop\": \"" << g.timing_stop << "\"";
    if (g.gpu_used >= 0) f << ",\n \"gpu_used\": " << (g.gpu_used ? "true" : "false");
    f << ",\n \"phase\": \"" << phase_name(g.phase) << "\",\n \"window_complete\": "
      << (g.window_complete ? "true" : "false");
    if (!g.incomplete.empty()) f << ",\n \"window_incomplete_reason\": \"" << json_escape(g.incomplete) << "\"";
    if (g.reference) {
      f << ",\n \"reference\": {\"window_step_peaks_bytes\": ";
      write_list(f, g.window_peaks);
      f << "}";
    }
    if (!g.gpu.empty())
      f << ",\n \"gpu\": \"" << json_escape(g.gpu) << "\",\n \"gpu_memory_bytes\": " << g.gpu_memory_bytes;
    f << ",\n \"memory_history\": " << (g.memory_on ? "true" : "false")
      << ",\n \"exited_cleanly\": " << (cleanly ? "true" : "false") << ",\n \"files\": {";
    for (size_t i = 0; i < g.files.size(); i++)
      f << (i ? ", " : "") << "\"" << g.files[i].first << "\": \"" << json_escape(g.files[i].second) << "\"";
    f << "},\n \"errors\": [";
    for (size_t i = 0; i < g.errors.size(); i++) f << (i ? ", " : "") << "\"" << json_escape(g.errors[i]) << "\"";
    f << "]\n}\n";
  }
  std::rename(tmp.c_str(), final_path.c_str());
}

int current_device() {
  try {
    return c10::cuda::current_device();
  } catch (...) {
    return 0;
  }
}

namespace tpi = torch::profiler::impl;
namespace tap = torch::autograd::profiler;

tpi::ProfilerConfig profiler_config() {
  return tpi::ProfilerConfig(tpi::ProfilerState::KINETO, /*report_input_shapes=*/true,
                             /*profile_memory=*/true, /*with_stack=*/false, /*with_flops=*/false,
                             /*with_modules=*/false);
}

// Whether the program has allocated GPU memory by now (a few steps in). A CPU-only program is
// profiled with CPU activity only, so CUPTI is never started in it: with TEARDOWN_CUPTI=1 (set
// by capture) a CPU-only libtorch program that had CUPTI started hung at exit.
bool program_used_gpu() {
  try {
    if (!at::cuda::is_available()) return false;
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(current_device());
    return stats.allocation[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].allocated > 0;
  } catch (...) {
    return false;
  }
}

std::set<tpi::ActivityType> profiler_activities() {
  // Decided once, at the first use (preparing the profiler, a few steps in).
  static const bool gpu = program_used_gpu();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.gpu_used = gpu ? 1 : 0;
  }
  if (!gpu) {
    // Capture's TEARDOWN_CUPTI is taken back: with it, a CPU-only program hung at exit after
    // its trace was saved (measured on pytorch/examples cpp/regression, docs/capture.md).
    if (env("STEPTRACE_SET_TEARDOWN_CUPTI") == "1") unsetenv("TEARDOWN_CUPTI");
    return {tpi::ActivityType::CPU};
  }
  return {tpi::ActivityType::CPU, tpi::ActivityType::CUDA};
}

void prepare_profiler() {
  if (g.profiler_prepared || !recording("trace")) return;
  try {
    tap::prepareProfiler(profiler_config(), profiler_activities());
    g.profiler_prepared = true;
  } catch (const std::exception& e) {
    error(std::string("profiler: ") + e.what());
  }
}

// Main thread only.
void start_window(int64_t now) {
  g.phase = Phase::Window;
  g.window_start_ns = now;
  try {
    // CUDA is up by now (a step has run); at start-up asking would initialise it early.
    if (at::cuda::is_available()) {
      const cudaDeviceProp* p = at::cuda::getDeviceProperties(current_device());
      std::lock_guard<std::mutex> lock(g.mu);
      g.gpu = p->name;
      g.gpu_memory_bytes = static_cast<int64_t>(p->totalGlobalMem);
    }
  } catch (const std::exception& e) {
    error(std::string("device properties: ") + e.what());
  }
  if (recording("trace")) {
    prepare_profiler();
    try {
      Cost cost("profiler_start");
      tap::enableProfiler(profiler_config(), profiler_activities());
      g.profiler_on = true;
    } catch (const std::exception& e) {
      error(std::string("profiler: ") + e.what());
    }
  }
  if (recording("et")) {
    try {
      if (tpi::addExecutionTraceObserver(path_of("exec_trace", ".json"))) {
        tpi::enableExecutionTraceObserver();
        g.et_on = true;
      }
    } catch (const std::exception& e) {
      error(std::string("execution trace: ") + e.what());
    }
  }
  write_status(false);
}

// Global state only: safe from the watcher thread too.
void stop_et() {
  if (!g.et_on) return;
  g.et_on = false;
  try {
    Cost cost("et_close");
    tpi::disableExecutionTraceObserver();
    tpi::removeExecutionTraceObserver();  // closes the JSON
    add_file("exec_trace", "exec_trace" + g.suffix + ".json");
  } catch (const std::exception& e) {
    error(std::string("execution trace: ") + e.what());
  }
}

void dump_snapshot(const std::string& role) {
  try {
    Cost cost(role == "snapshot" ? "snapshot" : "snapshot_exit");
    auto snap = torch::cuda::_memory_snapshot_pickled();
    std::ofstream(path_of(role, ".pickle"), std::ios::binary).write(snap.data(), snap.size());
    add_file(role, role + g.suffix + ".pickle");
  } catch (const std::exception& e) {
    error(std::string("snapshot: ") + e.what());
  }
}

void stop_memory_history() {
  if (!g.memory_on) return;
  try {
    torch::cuda::_record_memory_history(std::optional<std::string>(), std::optional<std::string>(),
                                        "all", 0);
    g.memory_on = false;
  } catch (const std::exception& e) {
    error(std::string("stop memory history: ") + e.what());
  }
}

// Main thread only: the profiler's state lives in its thread-local storage.
void end_window(bool complete, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.window_end_ns = now_epoch_ns();
  }
  if (g.profiler_on) {
    g.profiler_on = false;
    try {
      std::unique_ptr<tap::ProfilerResult> result;
      {
        Cost cost("profiler_stop");
        result = tap::disableProfiler();
      }
      if (result) {
        Cost cost("trace_export");
        result->save(path_of("trace", ".json"));
        add_file("trace", "trace" + g.suffix + ".json");
      }
    } catch (const std::exception& e) {
      error(std::string("profiler: ") + e.what());
    }
  }
  stop_et();
  if (g.memory_on) {
    dump_snapshot("snapshot");
    stop_memory_history();
  }
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.window_complete = complete;
    g.incomplete = why;
    g.after_start_ns = now_epoch_ns();
  }
  g.phase = Phase::Finished;
  write_status(false);
}

void reference_peak(int64_t n, int64_t first, int64_t last) {
  if (!g.reference) return;
  try {
    int dev = current_device();
    if (n > first && n <= last) {
      auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev);
      std::lock_guard<std::mutex> lock(g.mu);
      g.window_peaks.push_back(
          stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak);
    }
    if (n >= first && n < last) c10::cuda::CUDACachingAllocator::resetPeakStats(dev);
  } catch (const std::exception& e) {
    error(std::string("reference peak: ") + e.what());
  }
}

void start_memory_history() {
  try {
    // context "alloc": the default ("all") breaks a checkpointed backward (docs/capture.md).
    torch::cuda::_record_memory_history(std::optional<std::string>("all"),
                                        std::optional<std::string>("alloc"), "all",
                                        std::stoul(env("STEPTRACE_MAX_ENTRIES", "1000000")));
    g.memory_on = true;
  } catch (const std::exception& e) {
    error(std::string("record_memory_history: ") + e.what());
  }
}

// An accepted step boundary, on the main thread at the first op of the new step.
void on_boundary(int64_t now) {
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.boundaries.push_back(now);
  }
  if (g.phase == Phase::Timing) {
    bool done;
    {
      std::lock_guard<std::mutex> lock(g.mu);
      g.timing_ns.push_back(now);
      int64_t left_out = 0;
      const char* why = steptrace_timing::timing_stop_rule(g.timing_ns, g.timing_settle, g.timing_steps, g.timing_max_steps,
                                         g.timing_max_ns, g.lockstep, &left_out);
      done = why != nullptr;
      if (done) {
        g.timing_stop = why;
        g.timing_settle = left_out;
      }
    }
    if (done) {
      g.phase = Phase::Before;
      if (g.memory_paused) {
        start_memory_history();
        g.memory_paused = false;
      }
      write_status(false);
    }
    return;
  }
  const int64_t n = ++g.pstep;
  const Schedule& s = g.sched;
  const int64_t first = s.skip_first + s.wait + s.warmup;
  const int64_t last = first + s.active;
  reference_peak(n, first, last);
  if (g.phase == Phase::Before) {
    if (!g.timing_started && n == std::max<int64_t>(1, s.skip_first) && n < first && g.timing_steps > 0) {
      // Timed first, before anything heavy has run; memory history pauses meanwhile.
      g.timing_started = true;
      g.phase = Phase::Timing;
      if (g.memory_on) {
        stop_memory_history();
        g.memory_paused = true;
      }
      std::lock_guard<std::mutex> lock(g.mu);
      g.timing_ns.push_back(now);
    } else if (n == first) {
      start_window(now);
    } else if (n >= s.skip_first + s.wait && n < first) {
      prepare_profiler();
    }
  } else if (g.phase == Phase::Window && n >= last) {
    end_window(true, "");
    // Nothing more to find: without a global callback, ops skip RecordFunction's work. Ops
    // already begun keep their own copy of the callback list, so native_end still runs.
    at::removeCallback(g.callback);
    g.callback = 0;
  }
  if (!g.atexit_late.exchange(true)) {
    // For programs that call exit() rather than return from main.
    std::atexit(finish_at_exit);
  }
}

bool is_copy_op(const std::string& name) {
  return name == "aten::to" || name == "aten::_to_copy" || name == "aten::copy_" || name == "aten::cuda";
}

// A candidate boundary with the name of the step's first op: kept when it is the anchor.
void on_candidate(const std::string& head, int64_t now) {
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.candidates++;
  }
  if (!g.anchor_final) {
    if (g.anchor.empty()) g.anchor = head;  // tentative: the first one seen
    if (g.optimizer_mode) {
      g.heads.push_back(head);
      g.heads_in_mode++;
    }
    if (g.heads.size() >= 4) {
      const auto& h = g.heads;
      size_t k = h.size() - 4;
      std::string chosen;
      if (h[k] == h[k + 1] && h[k + 1] == h[k + 2] && h[k + 2] == h[k + 3]) {
        chosen = h[k];
      } else if (h[k] == h[k + 2] && h[k + 1] == h[k + 3]) {
        chosen = is_copy_op(h[k + 1]) && !is_copy_op(h[k]) ? h[k + 1] : h[k];
        std::lock_guard<std::mutex> lock(g.mu);
        g.method = "backward_cycle_2";
      }
      g.anchor_final = true;
      if (chosen != g.anchor && g.phase == Phase::Before) {
        // The tentative anchor was wrong: count again from here.
        std::lock_guard<std::mutex> lock(g.mu);
        g.boundaries.clear();
      }
      g.anchor = chosen;  // empty when no cycle: every candidate is a boundary
      g.heads.clear();
    }
  }
  if (g.anchor.empty() || head == g.anchor) on_boundary(now);
}

void handle_signal_on_main(int sig) {
  if (g.signal_handled.exchange(true)) return;
  if (g.phase == Phase::Window) {
    end_window(false, "signal " + std::to_string(sig) + " arrived inside the active window");
  }
  if (g.memory_on) {
    dump_snapshot("snapshot_exit");
    stop_memory_history();
  }
  g.phase = Phase::Finished;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.errors.push_back("stopped by signal " + std::to_string(sig));
  }
  write_status(false);
  g.finished = true;
  signal(sig, SIG_DFL);
  raise(sig);
}

std::unique_ptr<at::ObserverContext> native_start(const at::RecordFunction& fn) {
  const char* name = fn.name();
  if (fn.scope() == at::RecordScope::USER_SCOPE && std::strcmp(name, "steptrace::step") == 0) {
    if (std::this_thread::get_id() == g.main_thread && g.phase != Phase::Finished) {
      if (!g.explicit_marker.exchange(true)) {
        std::lock_guard<std::mutex> lock(g.mu);
        g.method = "explicit";
        g.boundaries.clear();
      }
      on_boundary(now_epoch_ns());
    }
    return nullptr;
  }
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION ||
      std::strncmp(name, "autograd::engine::evaluate_function", 35) == 0) {
    g.backward_seen = true;
  }
  if (std::this_thread::get_id() != g.main_thread) return nullptr;
  if (int sig = g.pending_signal.load()) handle_signal_on_main(sig);
  if (t_depth++ > 0 || g.phase == Phase::Finished) return nullptr;
  // A top-level op on the main thread.
  if (g.phase == Phase::Window && g.method == "time_window") {
    int64_t now = now_epoch_ns();
    if (now - g.window_start_ns >= g.fallback_window_ns) end_window(true, "");
    return nullptr;
  }
  if (g.explicit_marker) return nullptr;
  if (g.backward_seen) {
    if (!at::GradMode::is_enabled()) {
      g.optimizer_mode = true;
      g.nograd_since_backward = true;
      return nullptr;
    }
    // Reading a loss for logging (`loss.item()`) after the optimizer is not the next step.
    static const std::set<std::string> reads{"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"};
    if (reads.count(name) == 0 && (g.nograd_since_backward || !g.optimizer_mode)) {
      g.backward_seen = false;
      g.nograd_since_backward = false;
      on_candidate(name, now_epoch_ns());
      return nullptr;
    }
  }
  if (g.phase == Phase::Before && g.fallback_ns > 0) {
    bool none;
    {
      std::lock_guard<std::mutex> lock(g.mu);
      none = g.boundaries.empty();
    }
    int64_t now = now_epoch_ns();
    if (none && now - g.start_ns >= g.fallback_ns) {
      {
        std::lock_guard<std::mutex> lock(g.mu);
        g.method = "time_window";
      }
      start_window(now);
    }
  }
  return nullptr;
}

void native_end(const at::RecordFunction&, at::ObserverContext*) {
  if (std::this_thread::get_id() == g.main_thread && t_depth > 0) t_depth--;
}

// An autograd node starts (any thread). Nodes are numbered as the forward made them, so the
// first node of a backward pass (its root, made last) has a higher number than any node run
// before; the nodes after it in the pass were made earlier. AccumulateGrad has none (-1).
std::unique_ptr<at::ObserverContext> pass_start(const at::RecordFunction& fn) {
  const int64_t seq = fn.seqNr();
  int64_t seen = g.max_seq.load(std::memory_order_relaxed);
  while (seq > seen) {
    if (g.max_seq.compare_exchange_weak(seen, seq)) {
      const int64_t now = now_epoch_ns();
      std::lock_guard<std::mutex> lock(g.mu);
      if (g.pass_ns.size() < kMaxPassReadings) g.pass_ns.push_back(now);
      break;
    }
  }
  return nullptr;
}

void pass_end(const at::RecordFunction&, at::ObserverContext*) {}

// ---- signals --------------------------------------------------------------------------------

int g_wake[2] = {-1, -1};  // handler -> watcher
int g_done[2] = {-1, -1};  // watcher -> crash handler

void on_stop_signal(int sig) {
  int saved = errno;
  int expected = 0;
  if (g.pending_signal.compare_exchange_strong(expected, sig)) {
    char b = static_cast<char>(sig);
    ssize_t r = write(g_wake[1], &b, 1);
    (void)r;
  }
  errno = saved;
}

void on_crash_signal(int sig) {
  // A crash: the main thread cannot go on, so the watcher saves what it can (snapshot,
  // Execution Trace, status) while this handler waits a bounded time, then the signal is
  // raised again with its default action.
  int saved = errno;
  char b = static_cast<char>(sig | 0x40);
  ssize_t r = write(g_wake[1], &b, 1);
  (void)r;
  struct pollfd p = {g_done[0], POLLIN, 0};
  poll(&p, 1, 10000);
  signal(sig, SIG_DFL);
  errno = saved;
  raise(sig);
}

// Saves what needs no main thread: the memory snapshot (the allocator is global), the
// Execution Trace (a global observer) and the status.
void save_from_watcher(int sig, bool crash) {
  if (g.saved_by_watcher.exchange(true)) return;
  bool in_window = g.phase == Phase::Window;
  stop_et();
  if (g.memory_on) dump_snapshot(in_window ? "snapshot" : "snapshot_exit");
  {
    std::lock_guard<std::mutex> lock(g.mu);
    std::string what = crash ? "crashed with signal " : "stopped by signal ";
    g.errors.push_back(what + std::to_string(sig) +
                       (in_window ? " inside the active window: the Kineto trace of the window was lost "
                                    "(it can only be saved from the main thread)"
                                  : ""));
    if (in_window) g.incomplete = what + std::to_string(sig) + " inside the active window";
  }
  write_status(false);
}

void watcher() {
  for (;;) {
    char b = 0;
    ssize_t r = read(g_wake[0], &b, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    int sig = b & 0x3f;
    bool crash = (b & 0x40) != 0;
    if (crash) {
      save_from_watcher(sig, true);
      char d = 1;
      ssize_t w = write(g_done[1], &d, 1);
      (void)w;
      continue;
    }
    // Give the main thread time to reach its next op and save the trace itself.
    for (int i = 0; i < 50 && !g.signal_handled && !g.finished && g.phase != Phase::Finished; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (g.signal_handled || g.finished) continue;
    save_from_watcher(sig, false);
    signal(sig, SIG_DFL);
    kill(getpid(), sig);
  }
}

void install_signal_handlers() {
  if (pipe(g_wake) != 0 || pipe(g_done) != 0) {
    error("signal pipes: " + std::string(std::strerror(errno)));
    return;
  }
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    // A disposition inherited as "ignore" (nohup) stays.
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, nullptr) != 0) error("sigaction: " + std::string(std::strerror(errno)));
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    struct sigaction sa {};
    sa.sa_handler = on_crash_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    if (sigaction(sig, &sa, nullptr) != 0) error("sigaction: " + std::string(std::strerror(errno)));
  }
  std::thread(watcher).detach();
}

// ---- start and finish -----------------------------------------------------------------------

// Called when main returns: the profiler's thread-local state and CUDA are still alive.
void finish() {
  if (g.finished.exchange(true)) return;
  if (g.callback) at::removeCallback(g.callback);
  if (g.phase == Phase::Window) {
    end_window(false, "the program ended inside the active window");
  }
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.exit_ns = now_epoch_ns();
  }
  if (g.memory_on) {
    dump_snapshot("snapshot_exit");
    stop_memory_history();
  }
  write_status(true);
}

// Called from exit handlers when the program called exit() instead of returning from main:
// thread-local state (the profiler's) is already destroyed, so a window still open is lost.
void finish_at_exit() {
  if (g.finished.exchange(true)) return;
  if (g.phase == Phase::Window) {
    std::lock_guard<std::mutex> lock(g.mu);
    g.errors.push_back("the program called exit() inside the active window: its trace was not saved");
    g.incomplete = "exit() inside the active window";
  }
  stop_et();
  write_status(false);
}

void start_native() {
  g.out = env("STEPTRACE_OUT");
  if (g.out.empty()) return;
  std::string rank = env("RANK");
  g.suffix = rank.empty() ? "" : "_rank" + rank;
  g.main_thread = std::this_thread::get_id();
  g.sched = parse_schedule(env("STEPTRACE_SCHEDULE"));
  g.timing_steps = env_int("STEPTRACE_TIMING_STEPS", 10);
  g.timing_settle = env_int("STEPTRACE_TIMING_SETTLE", 5);
  g.timing_max_steps = env_int("STEPTRACE_TIMING_MAX_STEPS", 20);
  g.timing_max_ns = env_int("STEPTRACE_TIMING_MAX_S", 10) * 1000000000LL;
  g.lockstep = env_int("WORLD_SIZE", 1) > 1;
  g.reference = env("STEPTRACE_REFERENCE") == "1";
  g.fallback_ns = env_int("STEPTRACE_FALLBACK_S", 30) * 1000000000LL;
  g.fallback_window_ns = env_int("STEPTRACE_FALLBACK_WINDOW_S", 2) * 1000000000LL;
  g.start_ns = now_epoch_ns();
  if (recording("memory")) start_memory_history();
  install_signal_handlers();
  g.callback = at::addGlobalCallback(at::RecordFunctionCallback(native_start, native_end)
                                         .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                                  at::RecordScope::USER_SCOPE}));
  // Autograd nodes only: ops of every other scope find no callback for their scope and skip
  // RecordFunction's work, so this one costs a clock reading per backward node.
  at::addGlobalCallback(
      at::RecordFunctionCallback(pass_start, pass_end).scopes({at::RecordScope::BACKWARD_FUNCTION}));
  write_status(false);
}

void register_nvtx() {
  if (!recording("nvtx") || env("NVTX_INJECTION64_PATH").empty()) return;
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
