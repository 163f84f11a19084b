// tests/fuzz/fuzz_target.h: what each fuzz target defines. A target is a libFuzzer entry
// point (build it with clang -fsanitize=fuzzer for open-ended fuzzing) that also runs as an
// ordinary CTest test through fuzz_driver.cpp: its saved corpus (tests/fuzz/corpus/<name>/),
// the seeds it generates, then a bounded number of deterministic mutations of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// Must return 0 and never crash, hang or leak, whatever the bytes.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace eng::fuzz {

// Valid inputs made with the engine's own writers (so the corpus follows format changes):
// `fuzz_driver --save-seeds DIR` writes them as corpus files.
std::vector<std::string> seed_inputs();

}  // namespace eng::fuzz
