// generate: text from a trained language model through Tessera's inference
// API, as a program embedding the engine would: load a config and its
// weights (no trainer), continue a prompt greedily with the tokens streamed
// as they come, then sample two continuations on two threads sharing the
// one model.
//
//   generate CONFIG WEIGHTS PROMPT [NEW_TOKENS]
//   generate configs/kjv_gpt.yaml runs/kjv_gpt "In the beginning" 60
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <tessera/engine/tessera.hpp>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: generate CONFIG WEIGHTS PROMPT [NEW_TOKENS]\n"
                 "  WEIGHTS: a checkpoint directory (tessera train) or a .safetensors file (tessera export)\n";
    return 2;
  }
  try {
    tessera::InferenceModel model(argv[1], argv[2]);
    const tessera::Tokenizer& tokenizer = model.tokenizer();
    const std::string prompt = argv[3];

    tessera::GenerationOptions greedy;
    greedy.temperature = 0;  // the likeliest token each time
    greedy.max_new_tokens = argc > 4 ? std::atoi(argv[4]) : 40;
    std::cout << prompt << std::flush;
    model.generate({tokenizer.encode(prompt)}, greedy, [&](std::size_t, std::int32_t token) {
      const std::int32_t one[] = {token};
      std::cout << tokenizer.decode(one) << std::flush;  // as soon as it is chosen
    });
    std::cout << "\n";

    // One model, two threads: each gets what it would get alone.
    std::vector<std::string> sampled(2);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < sampled.size(); ++i)
      threads.emplace_back([&, i] {
        tessera::GenerationOptions options;
        options.temperature = 0.8;
        options.top_k = 20;
        options.max_new_tokens = greedy.max_new_tokens;
        options.seed = i;
        sampled[i] = tokenizer.decode(model.generate({tokenizer.encode(prompt)}, options).tokens[0]);
      });
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < sampled.size(); ++i) std::cout << "sampled (seed " << i << "): " << prompt << sampled[i] << "\n";
  } catch (const tessera::Error& e) {
    std::cerr << "generate: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
