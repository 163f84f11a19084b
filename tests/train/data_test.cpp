// tests/train/data_test.cpp: synthetic, text and .npy sources and their errors.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine/ir/interpret.h"
#include "engine/model/llama.h"
#include "engine/train/data.h"

namespace eng {
namespace {

namespace fs = std::filesystem;

ResolvedConfig tiny(const std::string& type, const std::string& path, int64_t b = 2, int64_t t = 8) {
  Config c;
  EXPECT_TRUE(c.set("dataset_type", type).ok());
  EXPECT_TRUE(c.set("dataset_path", path).ok());
  EXPECT_TRUE(c.set("per_device_batch_size", static_cast<double>(b)).ok());
  EXPECT_TRUE(c.set("max_target_length", t).ok());
  return resolve_config(c, 1).value();
}

std::string temp_file(const std::string& name, const std::string& contents) {
  fs::path p = fs::temp_directory_path() / ("shardlab_data_test_" + name);
  std::ofstream(p, std::ios::binary) << contents;
  return p.string();
}

TEST(DataTest, SyntheticIsMaxTextsZeros) {
  auto src = make_data_source(tiny("synthetic", "")).value();
  HostBatch b;
  src->next(b);
  EXPECT_EQ(b.inputs, std::vector<int32_t>(16, 0));
  EXPECT_EQ(b.inputs_position[9], 1);
  EXPECT_EQ(b.targets_segmentation[15], 1);
  EXPECT_EQ(src->position(), 1);
}

TEST(DataTest, TextTargetsAreInputsShiftedByOne) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + i % 26);
  auto src = make_data_source(tiny("text", temp_file("abc.txt", text))).value();
  HostBatch b;
  src->next(b);
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t + 1 < 8; ++t) EXPECT_EQ(b.targets[r * 8 + t], b.inputs[r * 8 + t + 1]);
  // Deterministic and seekable: batch 1 is the same whether reached by next() or set_position.
  HostBatch b1, again;
  src->next(b1);
  auto src2 = make_data_source(tiny("text", temp_file("abc.txt", text))).value();
  src2->set_position(1);
  src2->next(again);
  EXPECT_EQ(b1.inputs, again.inputs);
}

TEST(DataTest, TextErrorsNameTheFile) {
  auto missing = make_data_source(tiny("text", "/nonexistent/shardlab.txt"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot open '/nonexistent/shardlab.txt'"), std::string::npos);
  auto empty = make_data_source(tiny("text", temp_file("empty.txt", "")));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("is empty"), std::string::npos);
  auto shortf = make_data_source(tiny("text", temp_file("short.txt", "abc")));
  ASSERT_FALSE(shortf.ok());
  EXPECT_NE(shortf.status().message().find("has 3 tokens, fewer than one sequence of 8"), std::string::npos);
  // T + 1 tokens are exactly one window (T inputs, T targets shifted by one); T are too few.
  EXPECT_FALSE(make_data_source(tiny("text", temp_file("eight.txt", "abcdefgh"))).ok());
  auto nine = make_data_source(tiny("text", temp_file("nine.txt", "abcdefghi")));
  ASSERT_TRUE(nine.ok()) << nine.status().message();
  HostBatch b;
  (*nine)->next(b);
  EXPECT_EQ(b.inputs[0], 'a');
  EXPECT_EQ(b.inputs[7], 'h');
  EXPECT_EQ(b.targets[7], 'i');
}

std::string npy(const std::string& descr, const std::string& payload, size_t n) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                       std::to_string(n) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + payload;
}

TEST(DataTest, NpyTokensLoadAndAreRangeChecked) {
  std::string payload;
  for (int i = 0; i < 40; ++i) {
    uint16_t v = static_cast<uint16_t>(i % 50);
    payload.append(reinterpret_cast<const char*>(&v), 2);
  }
  auto src = make_data_source(tiny("tokens", temp_file("ok.npy", npy("<u2", payload, 40)))).value();
  HostBatch b;
  src->next(b);
  EXPECT_EQ(b.targets[0], b.inputs[1]);
  std::string bad;
  for (int i = 0; i < 40; ++i) {
    int32_t v = i == 17 ? 300 : 1;
    bad.append(reinterpret_cast<const char*>(&v), 4);
  }
  auto r = make_data_source(tiny("tokens", temp_file("bad.npy", npy("<i4", bad, 40))));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("token 300 at index 17 is outside the vocabulary [0, 256)"),
            std::string::npos);
  auto notnpy = make_data_source(tiny("tokens", temp_file("x.npy", "hello world, not numpy")));
  EXPECT_NE(notnpy.status().message().find("not a .npy file"), std::string::npos);
}

// Issue 16 item 6: a FIFO blocked in open(); /dev/zero and /dev/urandom were read forever.
TEST(DataTest, NonRegularFilesAreRefusedAtOnce) {
  const fs::path fifo =
      fs::temp_directory_path() / fmt::format("shardlab_data_fifo_{}", ::getpid());
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string type : {"text", "tokens"}) {
    auto r = make_data_source(tiny(type, fifo.string()));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("is a FIFO, not a regular file"), std::string::npos)
        << r.status().message();
  }
  fs::remove(fifo);
  for (const char* dev : {"/dev/zero", "/dev/urandom"}) {
    auto r = make_data_source(tiny("text", dev));
    ASSERT_FALSE(r.ok()) << dev;
    EXPECT_NE(r.status().message().find("is a character device, not a regular file"),
              std::string::npos) << r.status().message();
  }
  auto dir = make_data_source(tiny("text", fs::temp_directory_path().string()));
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos);
}

// MaxText's packing on a fortune-format file: documents between '%' lines, packed whole into
// rows, segment ids 1, 2, ... per document and 0 for padding, positions restarting at 0.
TEST(DataTest, PackingFortuneDocumentsRestartsPositions) {
  const std::vector<std::string> docs = {"ab cd\n", "hello\n", "a longer fortune than a row\n",
                                         "xy\n", "q\n"};
  std::string text = "%\n";  // a leading separator line is allowed
  for (const std::string& d : docs) text += d + "%\n";
  const std::string path = temp_file("fortunes", text);
  ResolvedConfig cfg = tiny("text", path, 4, 8);
  ASSERT_TRUE(cfg.packing);
  EXPECT_TRUE(cfg.model.attention_segment_ids);
  auto src = make_data_source(cfg).value();
  EXPECT_NE(src->describe().find("5 documents, packed"), std::string::npos) << src->describe();
  HostBatch b;
  for (int batch = 0; batch < 3; ++batch) {
    src->next(b);
    for (int64_t r = 0; r < 4; ++r) {
      int32_t seg = 0;
      std::string run;  // the current segment's input bytes, then its last target
      auto close = [&] {
        if (seg == 0) return;
        // A segment is a prefix (the first min(n - 1, 8) bytes) of exactly one document.
        bool found = false;
        for (const std::string& d : docs) found |= d.compare(0, run.size(), run) == 0;
        EXPECT_TRUE(found) << "row " << r << " segment " << seg << ": '" << run << "'";
      };
      for (int64_t t = 0; t < 8; ++t) {
        const size_t i = static_cast<size_t>(r * 8 + t);
        const int32_t s = b.inputs_segmentation[i];
        EXPECT_EQ(b.targets_segmentation[i], s);
        EXPECT_EQ(b.targets_position[i], b.inputs_position[i]);
        if (s != seg) {  // a new segment starts at position 0 (padding: 0 after the last)
          EXPECT_TRUE(s == seg + 1 || s == 0) << s << " after " << seg;
          EXPECT_EQ(b.inputs_position[i], 0);
          close();
          seg = s;
          run.clear();
        } else if (s != 0) {
          EXPECT_EQ(b.inputs_position[i], b.inputs_position[i - 1] + 1);
        }
        if (s == 0) {
          EXPECT_EQ(b.inputs[i], 0);
          EXPECT_EQ(b.targets[i], 0);
          continue;
        }
        if (run.empty()) run += static_cast<char>(b.inputs[i]);
        EXPECT_EQ(static_cast<char>(b.inputs[i]), run.back());  // inputs then targets chain
        run += static_cast<char>(b.targets[i]);
      }
      close();
      EXPECT_EQ(b.inputs_segmentation[r * 8], 1);  // every row starts with a document
    }
  }
  // Seekable: batch 2 again from a fresh source.
  auto again = make_data_source(cfg).value();
  again->set_position(2);
  HostBatch b2;
  again->next(b2);
  EXPECT_EQ(b2.inputs, b.inputs);
  EXPECT_EQ(b2.inputs_segmentation, b.inputs_segmentation);

  // packing=false: one stream, segment 1 everywhere, the model without segment ids.
  Config c;
  ASSERT_TRUE(c.set("dataset", "text:" + path).ok());
  ASSERT_TRUE(c.set("packing", false).ok());
  ASSERT_TRUE(c.set("per_device_batch_size", 4.0).ok());
  ASSERT_TRUE(c.set("max_target_length", int64_t{8}).ok());
  ResolvedConfig off = resolve_config(c, 1).value();
  EXPECT_FALSE(off.model.attention_segment_ids);
  auto stream = make_data_source(off).value();
  stream->next(b);
  EXPECT_EQ(b.inputs_segmentation, std::vector<int32_t>(32, 1));
}

// A .npy token file has no document boundaries: packing=true set explicitly is an error naming
// the file and the fix; by default a tokens file is read as one stream.
TEST(DataTest, PackingATokensFileIsAClearError) {
  const std::string payload(64, '\x05');
  const std::string path = temp_file("tokens.npy", npy("|u1", payload, 64));
  Config c;
  ASSERT_TRUE(c.set("dataset", "tokens:" + path).ok());
  ASSERT_TRUE(c.set("max_target_length", int64_t{8}).ok());
  Result<ResolvedConfig> by_default = resolve_config(c, 1);
  ASSERT_TRUE(by_default.ok()) << by_default.status().message();
  EXPECT_FALSE(by_default->packing);
  EXPECT_FALSE(by_default->model.attention_segment_ids);
  auto stream = make_data_source(*by_default);
  EXPECT_TRUE(stream.ok()) << stream.status().message();
  ASSERT_TRUE(c.set("packing", true).ok());
  Result<ResolvedConfig> r = resolve_config(c, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("packing=true needs document boundaries"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find(path), std::string::npos);
  EXPECT_NE(r.status().message().find("packing=false"), std::string::npos);
}

// Through the whole model (reference interpreter, double): in a packed row [doc A | doc B]
// whose loss counts doc B's targets only, doc A's tokens do not change the loss: doc B never
// attends to doc A. Without segment ids it does (the test can fail).
TEST(DataTest, PackedDocumentsDoNotAttendAcrossEachOtherInTheModel) {
  ModelConfig m = model_preset("llama-tiny").value();
  m.emb_dim = 16;
  m.num_query_heads = m.num_kv_heads = 2;
  m.head_dim = 8;
  m.mlp_dim = 32;
  m.num_decoder_layers = 2;
  const int64_t T = 12, TA = 5;
  auto loss_of = [&](bool segments, int32_t doc_a_token) {
    m.attention_segment_ids = segments;
    Builder b("packed");
    LlamaParams p = declare_llama_params(b, m);
    BatchArgs batch = declare_batch(b, m, 1, T);
    b.output(trace_llama_loss(b, m, p, batch).loss, "loss");
    const Program prog = std::move(b).finish();
    std::vector<HostTensor> args;
    for (const Argument& a : prog.args()) {
      const ValueInfo& v = prog.value(a.value);
      HostTensor h{v.shape, v.dtype, std::vector<double>(v.shape.numel())};
      if (a.role == ArgRole::kParam) {
        std::vector<float> f(v.shape.numel());
        init_param(v, 7, f.data());
        h.data.assign(f.begin(), f.end());
      }
      for (int64_t t = 0; t < T; ++t) {
        const bool in_a = t < TA;
        const int64_t pos = in_a ? t : t - TA;
        if (v.name == "inputs") h.data[t] = in_a ? doc_a_token + t : 100 + 3 * t;
        if (v.name == "targets") h.data[t] = 50 + t;
        if (v.name == "inputs_position" || v.name == "targets_position") h.data[t] = pos;
        if (v.name == "inputs_segmentation") h.data[t] = in_a ? 1 : 2;
        if (v.name == "targets_segmentation") h.data[t] = in_a ? 0 : 2;  // doc B's loss only
      }
      args.push_back(std::move(h));
    }
    Result<std::vector<HostTensor>> out = interpret(prog, args);
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? (*out)[0].data[0] : 0.0;
  };
  const double base = loss_of(true, 10);
  EXPECT_EQ(loss_of(true, 60), base);   // doc A's tokens changed: doc B's loss is the same
  EXPECT_NE(loss_of(false, 60), loss_of(false, 10));  // plain causal: doc B sees doc A
}

// set_rows (what each process asks for under mpirun): every source fills exactly the rows
// asked for, bitwise equal to those rows of the whole batch, and counts them; bad row lists
// are errors naming the row.
TEST(DataTest, SelectedRowsAreThoseRowsOfTheWholeBatch) {
  std::string fortunes, stream;
  for (int d = 0; d < 40; ++d) fortunes += std::string(2 + d % 11, static_cast<char>('a' + d % 26)) + "\n%\n";
  for (int i = 0; i < 500; ++i) stream += static_cast<char>('a' + i * 7 % 26);
  const std::string payload(64, '\x05');
  for (const ResolvedConfig& cfg :
       {tiny("synthetic", "", 6), tiny("text", temp_file("rows_fortunes", fortunes), 6),
        tiny("text", temp_file("rows_stream.txt", stream), 6),
        tiny("tokens", temp_file("rows.npy", npy("|u1", payload, 64)), 6)}) {
    auto whole = make_data_source(cfg).value();
    auto some = make_data_source(cfg).value();
    SCOPED_TRACE(whole->describe());
    const std::vector<int64_t> rows = {1, 2, 5};
    ASSERT_TRUE(some->set_rows(rows).ok());
    HostBatch w, s;
    for (int batch = 0; batch < 3; ++batch) {
      whole->next(w);
      some->next(s);
      ASSERT_EQ(s.batch, 3);
      EXPECT_EQ(s.rows, rows);
      for (size_t a = 0; a < w.arrays().size(); ++a)
        for (size_t k = 0; k < rows.size(); ++k)
          EXPECT_TRUE(std::equal(w.arrays()[a]->begin() + rows[k] * 8,
                                 w.arrays()[a]->begin() + (rows[k] + 1) * 8,
                                 s.arrays()[a]->begin() + static_cast<int64_t>(k) * 8))
              << "array " << a << " row " << rows[k];
    }
    EXPECT_EQ(whole->rows_produced(), 18);
    EXPECT_EQ(some->rows_produced(), 9);
    Status bad = some->set_rows({2, 1});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.message().find("row 1 (entry 1) is not an ascending row of the global batch of 6"),
              std::string::npos)
        << bad.message();
    EXPECT_FALSE(some->set_rows({6}).ok());
  }
}

}  // namespace
}  // namespace eng
