// A plain libtorch training program (no profiler code): `steptrace capture -- ./train`
// instruments it through the preloaded C++ shim.
//
// With STEPTRACE_REF_OUT set it writes reference.json there: per-step peak allocated bytes
// from the caching allocator's own statistics, a step being the span between the first
// grad-mode op after one backward and the next (where capture's boundaries fall).
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  torch::manual_seed(0);
  torch::Device dev(torch::kCUDA);
  auto model = torch::nn::Sequential(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).padding(1)), torch::nn::ReLU(),
      torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1).stride(2)), torch::nn::ReLU(),
      torch::nn::Flatten(), torch::nn::Linear(32 * 16 * 16, 10));
  model->to(dev);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto x_cpu = torch::randn({16, 3, 32, 32});
  auto y_cpu = torch::randint(0, 10, {16}, torch::kLong);
  const char* ref_dir = std::getenv("STEPTRACE_REF_OUT");
  std::vector<long long> peaks;
  std::vector<double> walls;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; i++) {
    // Reset where the next step begins: just before the input copy, the first grad-mode op.
    if (i > 0) {
      peaks.push_back(c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak);
      auto now = std::chrono::steady_clock::now();
      walls.push_back(std::chrono::duration<double>(now - t0).count());
      t0 = now;
    }
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    auto x = x_cpu.to(dev);
    auto y = y_cpu.to(dev);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    {
      torch::NoGradGuard ng;
      opt.step();
    }
    std::printf("step %d loss %.4f\n", i, loss.item<float>());
  }
  if (ref_dir) {
    std::ofstream ref(std::string(ref_dir) + "/reference.json");
    // "steps": {"i": ...} for loop iterations 0..steps-2 (the last one has no closing reset).
    ref << "{\n \"model\": \"libtorch_cnn\",\n \"loop_iterations\": " << steps << ",\n \"steps\": {";
    for (size_t i = 0; i < peaks.size(); i++)
      ref << (i ? ", " : "") << "\"" << i << "\": {\"max_memory_allocated\": " << peaks[i]
          << ", \"wall_s\": " << walls[i] << "}";
    ref << "}\n}\n";
  }
  return 0;
}
