// engine/train/data.cpp: synthetic, byte-level text and .npy token sources.
#include "engine/train/data.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "engine/base/file.h"
#include "engine/base/hash.h"
#include "engine/base/limits.h"

namespace eng {

void HostBatch::resize(int64_t b, int64_t t) {
  rows.resize(static_cast<size_t>(b));
  batch = b;
  seq = t;
  for (auto* v : {&inputs, &inputs_position, &inputs_segmentation, &targets, &targets_position,
                  &targets_segmentation})
    v->resize(static_cast<size_t>(b * t));
}

std::vector<const std::vector<int32_t>*> HostBatch::arrays() const {
  return {&inputs, &inputs_position, &inputs_segmentation,
          &targets, &targets_position, &targets_segmentation};
}

DataSource::DataSource(int64_t global_batch, int64_t seq)
    : global_batch_(global_batch), seq_(seq), rows_(static_cast<size_t>(global_batch)) {
  for (int64_t r = 0; r < global_batch; ++r) rows_[static_cast<size_t>(r)] = r;
}

void DataSource::next(HostBatch& out) {
  out.resize(static_cast<int64_t>(rows_.size()), seq_);
  std::copy(rows_.begin(), rows_.end(), out.rows.begin());
  for (auto* v : {&out.inputs, &out.inputs_position, &out.inputs_segmentation, &out.targets,
                  &out.targets_position, &out.targets_segmentation})
    std::fill(v->begin(), v->end(), 0);
  fill(out);
  rows_produced_ += static_cast<int64_t>(rows_.size());
  ++position_;
}

Status DataSource::set_rows(std::vector<int64_t> rows) {
  for (size_t k = 0; k < rows.size(); ++k)
    if (rows[k] < 0 || rows[k] >= global_batch_ || (k > 0 && rows[k] <= rows[k - 1]))
      return invalid_argument(
          "data: row {} (entry {}) is not an ascending row of the global batch of {}", rows[k], k,
          global_batch_);
  rows_ = std::move(rows);
  return ok_status();
}

namespace {

// Positions 0..T-1 and segment id 1 everywhere: unpacked sequences, no padding.
void fill_positions(HostBatch& out) {
  for (int64_t b = 0; b < out.batch; ++b)
    for (int64_t t = 0; t < out.seq; ++t) {
      const size_t i = static_cast<size_t>(b * out.seq + t);
      out.inputs_position[i] = out.targets_position[i] = static_cast<int32_t>(t);
      out.inputs_segmentation[i] = out.targets_segmentation[i] = 1;
    }
}

// MaxText's SyntheticDataIterator: zeros for inputs and targets, iota positions, ones
// for segmentation. Meant for performance runs (the loss quickly reaches ~0).
class SyntheticSource : public DataSource {
 public:
  using DataSource::DataSource;
  std::string describe() const override { return "synthetic"; }

 private:
  void fill(HostBatch& out) override { fill_positions(out); }  // tokens stay 0
};

// The draw of global row r of batch i: a function of (seed, i, r) only, so a process that
// produces some rows draws exactly what the one-process run draws for them.
uint64_t row_draw(uint64_t seed, int64_t batch, int64_t row) {
  return hash_mix(hash_mix(seed, static_cast<uint64_t>(batch)), static_cast<uint64_t>(row));
}

// Windows of T+1 tokens from one token stream: row r of batch i starts at a uniform
// offset drawn from (seed, i, r); inputs = window[0:T], targets = window[1:T+1].
class StreamSource : public DataSource {
 public:
  StreamSource(std::vector<int32_t> tokens, int64_t b, int64_t t, uint64_t seed, std::string what)
      : DataSource(b, t), tokens_(std::move(tokens)), seed_(seed), what_(std::move(what)) {}
  std::string describe() const override { return what_; }

 private:
  void fill(HostBatch& out) override {
    const uint64_t span = static_cast<uint64_t>(tokens_.size()) - static_cast<uint64_t>(seq_);
    for (int64_t k = 0; k < out.batch; ++k) {
      const uint64_t h = row_draw(seed_, position(), out.rows[static_cast<size_t>(k)]);
      const int64_t start = static_cast<int64_t>(h % span);
      std::memcpy(&out.inputs[k * seq_], &tokens_[start], sizeof(int32_t) * seq_);
      std::memcpy(&out.targets[k * seq_], &tokens_[start + 1], sizeof(int32_t) * seq_);
    }
    fill_positions(out);
  }

  std::vector<int32_t> tokens_;
  uint64_t seed_;
  std::string what_;
};

// One document of a packed text source: bytes [begin, begin + size) of the file.
struct Document {
  int64_t begin, size;
};

// The documents of a text file whose documents are separated by lines holding only '%' (the
// fortune/strfile format): the text between separator lines, each at least 2 bytes (one
// input and its target). No separator line: empty (the file is one stream).
std::vector<Document> split_documents(const std::string& raw) {
  std::vector<Document> docs;
  bool separated = false;
  int64_t begin = 0;
  const int64_t n = static_cast<int64_t>(raw.size());
  for (int64_t line = 0; line < n;) {
    int64_t end = line;
    while (end < n && raw[static_cast<size_t>(end)] != '\n') ++end;
    if (end - line == 1 && raw[static_cast<size_t>(line)] == '%') {
      separated = true;
      if (line - begin >= 2) docs.push_back({begin, line - begin});
      begin = end + 1;
    }
    line = end + 1;
  }
  if (!separated) return {};
  if (n - begin >= 2) docs.push_back({begin, n - begin});
  return docs;
}

// MaxText's packing (input_pipeline/packing/sequence_packing.py) of byte-level documents:
// a document of n bytes is n - 1 (input, target) pairs, truncated to T; row r of batch i starts
// at a document drawn from (seed, i, r) and takes the following documents (in file order,
// wrapping) while they fit whole; the rest of the row is padding (token 0, position 0,
// segment 0, which the loss masks). Segment ids count 1, 2, ... within a row; positions restart
// at 0 in every document; targets carry the same segments and positions as their inputs.
class PackedTextSource : public DataSource {
 public:
  PackedTextSource(std::string raw, std::vector<Document> docs, int64_t b, int64_t t,
                   uint64_t seed, std::string what)
      : DataSource(b, t), raw_(std::move(raw)), docs_(std::move(docs)), seed_(seed),
        what_(std::move(what)) {}
  std::string describe() const override { return what_; }

 private:
  void fill(HostBatch& out) override {  // padding: the zeros next() wrote
    for (int64_t k = 0; k < out.batch; ++k) {
      const uint64_t h = row_draw(seed_, position(), out.rows[static_cast<size_t>(k)]);
      fill_row(out, k, static_cast<size_t>(h % docs_.size()));
    }
  }

  // Held row k (a global row drawn from `first`): whole documents from docs_[first] on.
  void fill_row(HostBatch& out, int64_t k, size_t first) const {
    int64_t t = 0;
    for (size_t n = 0; n < docs_.size() && t < seq_; ++n) {
      const Document& d = docs_[(first + n) % docs_.size()];
      int64_t len = d.size - 1;  // (input, target) pairs
      if (t + len > seq_) {
        if (t > 0) break;  // starts the next row instead (MaxText's pack_dataset)
        len = seq_;        // longer than a row: truncated, as MaxText truncates examples
      }
      const int32_t seg = static_cast<int32_t>(n + 1);
      for (int64_t j = 0; j < len; ++j) {
        const size_t i = static_cast<size_t>(k * seq_ + t + j);
        out.inputs[i] = static_cast<unsigned char>(raw_[static_cast<size_t>(d.begin + j)]);
        out.targets[i] = static_cast<unsigned char>(raw_[static_cast<size_t>(d.begin + j + 1)]);
        out.inputs_position[i] = out.targets_position[i] = static_cast<int32_t>(j);
        out.inputs_segmentation[i] = out.targets_segmentation[i] = seg;
      }
      t += len;
    }
  }

  std::string raw_;
  std::vector<Document> docs_;
  uint64_t seed_;
  std::string what_;
};

// Datasets are read whole (as tokens: 4 bytes each), so their size is bounded; a FIFO or a
// device (/dev/zero, /dev/urandom) is refused instead of read forever.
constexpr int64_t kMaxDatasetBytes = int64_t{1} << 30;

Result<std::string> read_file(const std::string& path) {
  return read_regular_file(path, "data", kMaxDatasetBytes);
}

}  // namespace

// A 1-D .npy array of integers (<u2, <i4, <i8, |u1): numpy.save's format version 1-3.
namespace {

// The element count of a .npy header's 'shape': (N,), (A, B) or () (a scalar: 1).
Result<int64_t> npy_shape_numel(const std::string& path, const std::string& header) {
  const size_t key = header.find("'shape'");
  const size_t open = key == std::string::npos ? key : header.find('(', key);
  const size_t close = open == std::string::npos ? open : header.find(')', open);
  if (close == std::string::npos)
    return invalid_argument("data: '{}': the .npy header has no 'shape': ({})", path, header);
  const std::string dims = header.substr(open + 1, close - open - 1);
  int64_t numel = 1;
  size_t i = 0;
  while (i < dims.size()) {
    const size_t comma = std::min(dims.find(',', i), dims.size());
    std::string d = dims.substr(i, comma - i);
    d.erase(0, d.find_first_not_of(" \t"));
    d.erase(d.find_last_not_of(" \t") + 1);
    i = comma + 1;
    if (d.empty() && comma == dims.size()) break;  // "(N,)": the trailing comma
    int64_t v = -1;
    const auto [ptr, err] = std::from_chars(d.data(), d.data() + d.size(), v);
    if (d.empty() || err != std::errc() || ptr != d.data() + d.size() || v < 0 ||
        (v > 0 && numel > kMaxTensorElements / v))
      return invalid_argument("data: '{}': bad .npy shape ({})", path, dims);
    numel *= v;
  }
  return numel;
}

}  // namespace

Result<std::vector<int32_t>> parse_npy_tokens(const std::string& path, const std::string& raw,
                                              int64_t vocab) {
  if (raw.size() < 10 || raw.compare(0, 6, "\x93NUMPY") != 0)
    return invalid_argument("data: '{}' is not a .npy file (bad magic)", path);
  const int major = static_cast<unsigned char>(raw[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(raw[8]) | (static_cast<unsigned char>(raw[9]) << 8);
    offset = 10;
  } else {
    if (raw.size() < 12) return invalid_argument("data: '{}': truncated .npy header", path);
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(raw[8 + i])) << (8 * i);
    offset = 12;
  }
  if (offset + header_len > raw.size()) return invalid_argument("data: '{}': truncated .npy header", path);
  const std::string header = raw.substr(offset, header_len);
  auto field = [&](const char* key) -> std::string {
    size_t k = header.find(key);
    if (k == std::string::npos) return "";
    size_t colon = header.find(':', k);
    size_t end = header.find_first_of(",}", colon);
    std::string v = header.substr(colon + 1, end - colon - 1);
    if (v.find('(') != std::string::npos) v = header.substr(colon + 1, header.find(')', colon) - colon);
    return v;
  };
  std::string descr = field("'descr'"), fortran = field("'fortran_order'");
  if (fortran.find("True") != std::string::npos)
    return invalid_argument("data: '{}': fortran-ordered arrays are not supported", path);
  int width;
  bool is_signed;
  if (descr.find("u1") != std::string::npos) width = 1, is_signed = false;
  else if (descr.find("<u2") != std::string::npos) width = 2, is_signed = false;
  else if (descr.find("<i4") != std::string::npos) width = 4, is_signed = true;
  else if (descr.find("<i8") != std::string::npos) width = 8, is_signed = true;
  else
    return invalid_argument("data: '{}': dtype {} not supported; use uint8, uint16, int32 or int64",
                            path, descr);
  const size_t data_off = offset + header_len;
  // The header's shape says how many tokens there are: the data must hold exactly that many
  // (a truncated or padded file is refused, not read short or long).
  ENG_ASSIGN_OR_RETURN(const int64_t numel, npy_shape_numel(path, header));
  if (static_cast<uint64_t>(numel) * static_cast<uint64_t>(width) != raw.size() - data_off)
    return invalid_argument("data: '{}': the header's shape holds {} tokens ({} bytes of "
                            "{}-byte tokens) but the file has {} data bytes",
                            path, numel, numel * width, width, raw.size() - data_off);
  const size_t n = static_cast<size_t>(numel);
  std::vector<int32_t> tokens(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t v = 0;
    const unsigned char* p = reinterpret_cast<const unsigned char*>(raw.data() + data_off + i * width);
    uint64_t u = 0;
    for (int k = 0; k < width; ++k) u |= static_cast<uint64_t>(p[k]) << (8 * k);
    v = static_cast<int64_t>(u);
    if (is_signed && width == 4) v = static_cast<int32_t>(u);
    if (v < 0 || v >= vocab)
      return invalid_argument("data: '{}': token {} at index {} is outside the vocabulary [0, {})",
                              path, v, i, vocab);
    tokens[i] = static_cast<int32_t>(v);
  }
  return tokens;
}

Result<std::unique_ptr<DataSource>> make_data_source(const ResolvedConfig& c) {
  const int64_t B = c.global_batch_size, T = c.max_target_length;
  if (c.dataset_type == "synthetic")
    return std::unique_ptr<DataSource>(new SyntheticSource(B, T));
  ENG_ASSIGN_OR_RETURN(std::string raw, read_file(c.dataset_path));
  std::vector<int32_t> tokens;
  std::string what;
  if (c.dataset_type == "text") {
    if (raw.empty()) return invalid_argument("data: text file '{}' is empty", c.dataset_path);
    if (c.model.vocab_size < 256)
      return invalid_argument("data: byte-level text needs vocab_size >= 256, got {}",
                              c.model.vocab_size);
    if (c.packing) {
      std::vector<Document> docs = split_documents(raw);
      if (!docs.empty()) {
        std::string what = fmt::format("text:{} ({} bytes, {} documents, packed)",
                                       c.dataset_path, raw.size(), docs.size());
        return std::unique_ptr<DataSource>(new PackedTextSource(
            std::move(raw), std::move(docs), B, T, c.data_shuffle_seed, std::move(what)));
      }
    }
    tokens.resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) tokens[i] = static_cast<unsigned char>(raw[i]);
    what = fmt::format("text:{} ({} bytes)", c.dataset_path, raw.size());
  } else {
    ENG_ASSIGN_OR_RETURN(tokens, parse_npy_tokens(c.dataset_path, raw, c.model.vocab_size));
    what = fmt::format("tokens:{} ({} tokens)", c.dataset_path, tokens.size());
  }
  if (static_cast<int64_t>(tokens.size()) < T + 1)  // one window: T inputs and the next target
    return invalid_argument("data: '{}' has {} tokens, fewer than one sequence of {} + 1",
                            c.dataset_path, tokens.size(), T);
  return std::unique_ptr<DataSource>(new StreamSource(std::move(tokens), B, T, c.data_shuffle_seed, what));
}

}  // namespace eng
