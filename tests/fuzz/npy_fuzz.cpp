// tests/fuzz/npy_fuzz.cpp: the .npy token reader over arbitrary bytes.
#include <cstdlib>
#include <string>

#include "engine/train/data.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data), size);
  for (int64_t vocab : {256, 50000}) {
    eng::Result<std::vector<int32_t>> r = eng::parse_npy_tokens("fuzz.npy", raw, vocab);
    if (r.ok())
      for (int32_t t : *r)
        if (t < 0 || t >= vocab) std::abort();  // accepted tokens are in the vocabulary
  }
  return 0;
}

namespace eng::fuzz {

namespace {
// numpy.save's layout: magic, version, header length, the dict padded to 64 bytes, data.
std::string npy(int major, const std::string& descr, const std::string& data, int64_t count) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                     std::to_string(count) + ",), }";
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const size_t n = dict.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  return out + dict + data;
}
}  // namespace

std::vector<std::string> seed_inputs() {
  std::string u1, u2, i4, i8;
  for (int i = 0; i < 12; ++i) {
    u1 += static_cast<char>(i * 7);
    u2 += std::string{static_cast<char>(i * 11), 0};
    i4 += std::string{static_cast<char>(i * 13), 0, 0, 0};
    i8 += std::string{static_cast<char>(i * 17), 0, 0, 0, 0, 0, 0, 0};
  }
  return {npy(1, "|u1", u1, 12), npy(1, "<u2", u2, 12), npy(2, "<i4", i4, 12),
          npy(3, "<i8", i8, 12)};
}

}  // namespace eng::fuzz
