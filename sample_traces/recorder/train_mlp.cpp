// A small libtorch training program profiled with the Kineto profiler from C++, with no
// ProfilerStep markers: steptrace must find its iterations from the backward passes.
//
// Writes into argv[1]: trace.json (ProfilerResult::save), snapshot.pickle
// (_memory_snapshot_pickled) and reference.json (per-step peak allocated bytes from the caching
// allocator's own statistics, step count, versions).
#include <torch/torch.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: train_mlp OUTDIR\n");
    return 2;
  }
  std::string out = argv[1];
  torch::cuda::_record_memory_history(
      std::optional<std::string>("all"), std::optional<std::string>("alloc"), "all", 1000000);
  torch::manual_seed(0);
  torch::Device dev(torch::kCUDA);
  auto model = torch::nn::Sequential(
      torch::nn::Linear(512, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 1024),
      torch::nn::ReLU(), torch::nn::Linear(1024, 10));
  model->to(dev);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto x_cpu = torch::randn({64, 512});
  auto y_cpu = torch::randint(0, 10, {64}, torch::kLong);

  auto step = [&]() {
    opt.zero_grad();
    auto x = x_cpu.to(dev);
    auto y = y_cpu.to(dev);
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  for (int i = 0; i < 2; i++) step();  // warm-up, outside the trace

  namespace tpi = torch::profiler::impl;
  namespace tap = torch::autograd::profiler;
  tpi::ProfilerConfig cfg(tpi::ProfilerState::KINETO, /*report_input_shapes=*/true,
                          /*profile_memory=*/true, /*with_stack=*/false, /*with_flops=*/false,
                          /*with_modules=*/false);
  std::set<tpi::ActivityType> acts{tpi::ActivityType::CPU, tpi::ActivityType::CUDA};
  tap::prepareProfiler(cfg, acts);
  tap::enableProfiler(cfg, acts);
  const int steps = 4;
  std::vector<long long> peaks;
  std::vector<double> walls;
  for (int i = 0; i < steps; i++) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    auto t0 = std::chrono::steady_clock::now();
    step();
    walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    peaks.push_back(c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak);
  }
  auto result = tap::disableProfiler();
  result->save(out + "/trace.json");
  auto snap = torch::cuda::_memory_snapshot_pickled();
  std::ofstream(out + "/snapshot.pickle", std::ios::binary).write(snap.data(), snap.size());

  size_t param_bytes = 0;
  for (auto& p : model->parameters()) param_bytes += p.numel() * p.element_size();
  std::ofstream ref(out + "/reference.json");
  ref << "{\n \"model\": \"libtorch_mlp\",\n \"profiled_iterations\": " << steps
      << ",\n \"param_bytes\": " << param_bytes << ",\n \"torch\": \"" << TORCH_VERSION
      << "\",\n \"steps_max_memory_allocated\": [";
  for (int i = 0; i < steps; i++) ref << (i ? ", " : "") << peaks[i];
  ref << "],\n \"steps_wall_s\": [";
  for (int i = 0; i < steps; i++) ref << (i ? ", " : "") << walls[i];
  ref << "]\n}\n";
  std::printf("libtorch_mlp: ok\n");
  return 0;
}
