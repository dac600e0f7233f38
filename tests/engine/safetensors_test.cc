#include "strata/engine/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "strata/common/file_util.h"
#include "strata/common/half.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string MakeTempDir() {
  std::string pattern = ::testing::TempDir() + "/strata_st_XXXXXX";
  char* dir = mkdtemp(pattern.data());
  EXPECT_NE(dir, nullptr);
  return pattern;
}

std::span<const uint8_t> Bytes(const void* p, size_t n) {
  return {static_cast<const uint8_t*>(p), n};
}

// A raw file: 8-byte little-endian header length, the header text, then `data_size` bytes.
std::string RawFile(const std::string& header, size_t data_size) {
  const uint64_t len = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  return out + header + std::string(data_size, '\x11');
}

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_STREQ(DTypeName(DType::kBF16), "BF16");
  EXPECT_STREQ(DTypeName(DType::kBool), "BOOL");
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kI16), 2u);
  EXPECT_EQ(DTypeSize(DType::kU8), 1u);
}

TEST(SafetensorsWriterTest, RoundTripAllDtypes) {
  const std::string dir = MakeTempDir();
  SafetensorsWriter w;
  const std::vector<float> f32 = {1.5f, -2.0f, 0.25f, 3.0f, 4.0f, 5.0f};
  const std::vector<uint16_t> bf16 = {FloatToBf16(1.0f), FloatToBf16(-0.5f)};
  const std::vector<uint16_t> f16 = {FloatToF16(2.0f), FloatToF16(0.125f), FloatToF16(-1.0f)};
  const std::vector<int64_t> i64 = {-7, 1LL << 40};
  const std::vector<uint8_t> flags = {1, 0, 1};
  ASSERT_TRUE(w.AddF32("a.weight", {2, 3}, f32).ok());
  ASSERT_TRUE(w.Add("b", DType::kBF16, {2}, Bytes(bf16.data(), 4)).ok());
  ASSERT_TRUE(w.Add("c", DType::kF16, {3, 1}, Bytes(f16.data(), 6)).ok());
  ASSERT_TRUE(w.Add("ids", DType::kI64, {2}, Bytes(i64.data(), 16)).ok());
  ASSERT_TRUE(w.Add("mask", DType::kBool, {3}, Bytes(flags.data(), 3)).ok());
  ASSERT_TRUE(w.Add("empty", DType::kF32, {0, 4}, {}).ok());
  ASSERT_TRUE(w.AddF32("scalar", {}, std::vector<float>{9.0f}).ok());
  w.SetMetadata("format", "pt");
  ASSERT_TRUE(w.WriteFile(dir + "/x.safetensors").ok());

  auto file = SafetensorsFile::Open(dir + "/x.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  EXPECT_EQ((*file)->tensors().size(), 7u);
  const TensorInfo* a = (*file)->Find("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_THAT(a->shape, ElementsAre(2, 3));
  EXPECT_EQ(a->numel(), 6);
  EXPECT_EQ(std::memcmp(a->data, f32.data(), 24), 0);
  const TensorInfo* ids = (*file)->Find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, DType::kI64);
  EXPECT_EQ(std::memcmp(ids->data, i64.data(), 16), 0);
  EXPECT_EQ((*file)->Find("mask")->dtype, DType::kBool);
  EXPECT_EQ((*file)->Find("empty")->numel(), 0);
  EXPECT_EQ((*file)->Find("scalar")->numel(), 1);
  EXPECT_TRUE((*file)->Find("scalar")->shape.empty());
  EXPECT_EQ((*file)->Find("nope"), nullptr);

  std::vector<float> out(3);
  ASSERT_TRUE(ConvertToF32(*(*file)->Find("c"), out.data()).ok());
  EXPECT_THAT(out, ElementsAre(2.0f, 0.125f, -1.0f));
}

TEST(SafetensorsWriterTest, HeaderIsPaddedAndDataFollowsInInsertionOrder) {
  SafetensorsWriter w;
  const std::vector<float> v = {1.0f};
  ASSERT_TRUE(w.AddF32("zzz", {1}, v).ok());
  ASSERT_TRUE(w.AddF32("aaa", {1}, std::vector<float>{2.0f}).ok());
  const std::string bytes = w.Serialize();
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  EXPECT_EQ(len % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  ASSERT_EQ(bytes.size(), 8 + len + 8);
  float first = 0;
  std::memcpy(&first, bytes.data() + 8 + len, 4);
  EXPECT_EQ(first, 1.0f);  // "zzz" was added first
}

TEST(SafetensorsWriterTest, RejectsInvalidTensors) {
  SafetensorsWriter w;
  const std::vector<float> v = {1.0f, 2.0f};
  EXPECT_TRUE(w.AddF32("t", {2}, v).ok());
  EXPECT_THAT(w.AddF32("t", {2}, v).message(), HasSubstr("added twice"));
  EXPECT_THAT(w.AddF32("u", {3}, v).message(), HasSubstr("shape and dtype need 12"));
  EXPECT_FALSE(w.AddF32("w", {-2}, v).ok());
  EXPECT_FALSE(w.AddF32("__metadata__", {2}, v).ok());
}

TEST(ConvertTest, BetweenFloatTypes) {
  const std::vector<float> f32 = {1.0f, -3.140625f, 65504.0f, 1e-8f};
  TensorInfo t{"w", DType::kF32, {4}, reinterpret_cast<const uint8_t*>(f32.data()), 16, "f"};
  std::vector<uint16_t> bf(4), h(4);
  ASSERT_TRUE(ConvertToBF16(t, bf.data()).ok());
  ASSERT_TRUE(ConvertToF16(t, h.data()).ok());
  EXPECT_EQ(bf[0], 0x3f80);
  EXPECT_EQ(bf[1], FloatToBf16(-3.140625f));
  EXPECT_EQ(h[0], 0x3c00);
  EXPECT_EQ(h[2], 0x7bff);  // largest finite half
  EXPECT_EQ(h[3], 0x0000);  // underflows to zero

  TensorInfo tb{"wb", DType::kBF16, {4}, reinterpret_cast<const uint8_t*>(bf.data()), 8, "f"};
  std::vector<float> back(4);
  ASSERT_TRUE(ConvertToF32(tb, back.data()).ok());
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -3.140625f);
  std::vector<uint16_t> h2(4);
  ASSERT_TRUE(ConvertToF16(tb, h2.data()).ok());
  EXPECT_EQ(F16ToFloat(h2[1]), -3.140625f);
  std::vector<uint16_t> same(4);
  ASSERT_TRUE(ConvertToBF16(tb, same.data()).ok());
  EXPECT_EQ(same, bf);
}

TEST(ConvertTest, RejectsNonFloatNamingTensor) {
  const std::vector<int32_t> v = {1, 2};
  TensorInfo t{"ids", DType::kI32, {2}, reinterpret_cast<const uint8_t*>(v.data()), 8, "m.st"};
  float out[2];
  const absl::Status s = ConvertToF32(t, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("m.st: tensor ids"));
  EXPECT_THAT(s.message(), HasSubstr("I32"));
  uint16_t h[2];
  EXPECT_FALSE(ConvertToBF16(t, h).ok());
  EXPECT_FALSE(ConvertToF16(t, h).ok());
}

TEST(CheckpointTest, SingleFile) {
  const std::string dir = MakeTempDir();
  SafetensorsWriter w;
  ASSERT_TRUE(w.AddF32("model.norm.weight", {4}, std::vector<float>(4, 1.0f)).ok());
  ASSERT_TRUE(w.AddF32("lm_head.weight", {2, 4}, std::vector<float>(8, 0.5f)).ok());
  ASSERT_TRUE(w.WriteFile(dir + "/model.safetensors").ok());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->Has("lm_head.weight"));
  EXPECT_FALSE((*ckpt)->Has("model.embed_tokens.weight"));
  EXPECT_THAT((*ckpt)->TensorNames(), ElementsAre("lm_head.weight", "model.norm.weight"));
  const int64_t good[] = {2, 4};
  auto t = (*ckpt)->GetWithShape("lm_head.weight", good);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->nbytes, 32u);
  const int64_t bad[] = {4, 2};
  auto wrong = (*ckpt)->GetWithShape("lm_head.weight", bad);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.status().message(), dir +
                                          "/model.safetensors: tensor lm_head.weight has "
                                          "shape [2, 4], expected [4, 2]");
  auto missing = (*ckpt)->Get("model.embed_tokens.weight");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), dir + ": missing tensor model.embed_tokens.weight");
}

TEST(CheckpointTest, EmptyDirectoryIsNotFound) {
  const std::string dir = MakeTempDir();
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model.safetensors"));
}

class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    SafetensorsWriter a, b;
    ASSERT_TRUE(a.AddF32("x", {2}, std::vector<float>{1, 2}).ok());
    ASSERT_TRUE(a.AddF32("y", {1}, std::vector<float>{3}).ok());
    ASSERT_TRUE(b.AddF32("z", {3}, std::vector<float>{4, 5, 6}).ok());
    ASSERT_TRUE(a.WriteFile(dir_ + "/model-00001-of-00002.safetensors").ok());
    ASSERT_TRUE(b.WriteFile(dir_ + "/model-00002-of-00002.safetensors").ok());
  }
  void WriteIndex(const std::string& weight_map) {
    ASSERT_TRUE(
        WriteStringToFile(dir_ + "/model.safetensors.index.json",
                          R"({"metadata": {"total_size": 24}, "weight_map": )" + weight_map + "}")
            .ok());
  }
  std::string dir_;
};

TEST_F(ShardedCheckpointTest, ReadsEveryShard) {
  WriteIndex(R"({"x": "model-00001-of-00002.safetensors", "y": "model-00001-of-00002.safetensors",
                 "z": "model-00002-of-00002.safetensors"})");
  auto ckpt = Checkpoint::Open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_THAT((*ckpt)->TensorNames(), ElementsAre("x", "y", "z"));
  auto z = (*ckpt)->Get("z");
  ASSERT_TRUE(z.ok());
  EXPECT_THAT((*z)->file, HasSubstr("model-00002-of-00002.safetensors"));
  std::vector<float> v(3);
  ASSERT_TRUE(ConvertToF32(**z, v.data()).ok());
  EXPECT_THAT(v, ElementsAre(4, 5, 6));
  auto x = (*ckpt)->Get("x");
  ASSERT_TRUE(x.ok());
  EXPECT_THAT((*x)->file, HasSubstr("model-00001-of-00002.safetensors"));
}

TEST_F(ShardedCheckpointTest, IndexOnlyExposesMappedTensors) {
  WriteIndex(R"({"x": "model-00001-of-00002.safetensors"})");
  auto ckpt = Checkpoint::Open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_THAT((*ckpt)->TensorNames(), ElementsAre("x"));
}

TEST_F(ShardedCheckpointTest, TensorInWrongShardIsAnError) {
  WriteIndex(R"({"x": "model-00002-of-00002.safetensors"})");
  auto ckpt = Checkpoint::Open(dir_);
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ckpt.status().message(),
              HasSubstr("tensor x is mapped to model-00002-of-00002.safetensors, which does not "
                        "hold it"));
}

TEST_F(ShardedCheckpointTest, MissingShardIsNotFound) {
  WriteIndex(R"({"x": "model-00001-of-00003.safetensors"})");
  auto ckpt = Checkpoint::Open(dir_);
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("lists shard model-00001-of-00003.safetensors"));
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model.safetensors.index.json"));
}

TEST_F(ShardedCheckpointTest, BadIndexIsAnError) {
  for (const std::string& map : {std::string(R"(["x"])"), std::string(R"({"x": 3})"),
                                 std::string(R"({"x": "../model-00001-of-00002.safetensors"})"),
                                 std::string(R"({"x": "/etc/passwd"})")}) {
    WriteIndex(map);
    auto ckpt = Checkpoint::Open(dir_);
    EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kInvalidArgument) << map;
    EXPECT_THAT(ckpt.status().message(), HasSubstr("model.safetensors.index.json")) << map;
  }
  ASSERT_TRUE(WriteStringToFile(dir_ + "/model.safetensors.index.json", "{not json").ok());
  EXPECT_EQ(Checkpoint::Open(dir_).status().code(), absl::StatusCode::kInvalidArgument);
}

struct HostileCase {
  const char* what;
  std::string contents;
  const char* tensor;  // expected in the message; "" when the error concerns the whole file
  const char* detail;  // expected in the message
};

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return absl::StrCat("\"", name, "\": {\"dtype\": ", dtype, ", \"shape\": ", shape,
                      ", \"data_offsets\": ", offsets, "}");
}

std::string WithLength(uint64_t len, const std::string& rest) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  return out + rest;
}

std::vector<HostileCase> HostileCases() {
  const std::string ok_b = Entry("b", "\"F32\"", "[1]", "[8, 12]");
  return {
      {"short file", "abc", "", "shorter than the 8-byte"},
      {"header past end", WithLength(1000, "{}"), "", "exceeds the 2 bytes"},
      {"absurd header", WithLength(1ull << 40, "{}"), "", "exceeds the limit"},
      {"not json", RawFile("{\"a\": ", 0), "", "not valid JSON"},
      {"not an object", RawFile("[1, 2]", 0), "", "must be a JSON object"},
      {"entry not object", RawFile("{\"w\": 5}", 0), "w", "entry must be an object"},
      {"no dtype", RawFile(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4), "w",
       "missing \"dtype\""},
      {"no shape", RawFile(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), "w",
       "missing \"shape\""},
      {"no offsets", RawFile(R"({"w": {"dtype": "F32", "shape": [1]}})", 4), "w",
       "missing \"data_offsets\""},
      {"unknown dtype", RawFile("{" + Entry("w", "\"Q4\"", "[1]", "[0, 4]") + "}", 4), "w",
       "unknown dtype"},
      {"dtype not string", RawFile("{" + Entry("w", "4", "[1]", "[0, 4]") + "}", 4), "w",
       "unknown dtype"},
      {"negative dim", RawFile("{" + Entry("w", "\"F32\"", "[-1]", "[0, 4]") + "}", 4), "w",
       "not a non-negative integer"},
      {"string dim", RawFile("{" + Entry("w", "\"F32\"", "[\"1\"]", "[0, 4]") + "}", 4), "w",
       "not a non-negative integer"},
      {"shape not list", RawFile("{" + Entry("w", "\"F32\"", "1", "[0, 4]") + "}", 4), "w",
       "shape must be a list"},
      {"overflowing shape",
       RawFile("{" + Entry("w", "\"F32\"", "[4294967296, 4294967296]", "[0, 4]") + "}", 4), "w",
       "overflows"},
      {"bytes overflow",
       RawFile("{" + Entry("w", "\"F64\"", "[4611686018427387904]", "[0, 4]") + "}", 4), "w",
       "need"},
      {"offsets past data", RawFile("{" + Entry("w", "\"F32\"", "[1]", "[0, 4]") + "}", 2), "w",
       "run past the data section"},
      {"end before begin", RawFile("{" + Entry("w", "\"F32\"", "[1]", "[4, 0]") + "}", 4), "w",
       "end is before begin"},
      {"size mismatch", RawFile("{" + Entry("w", "\"F32\"", "[2]", "[0, 4]") + "}", 4), "w",
       "span 4 bytes"},
      {"three offsets", RawFile("{" + Entry("w", "\"F32\"", "[1]", "[0, 4, 8]") + "}", 4), "w",
       "two non-negative integers"},
      {"negative offset", RawFile("{" + Entry("w", "\"F32\"", "[1]", "[-4, 0]") + "}", 4), "w",
       "two non-negative integers"},
      {"overlap",
       RawFile("{" + Entry("a", "\"F32\"", "[2]", "[0, 8]") + ", " +
                   Entry("b", "\"F32\"", "[1]", "[4, 8]") + "}",
               8),
       "b", "overlaps tensor a"},
      {"hole", RawFile("{" + Entry("a", "\"F32\"", "[1]", "[0, 4]") + ", " + ok_b + "}", 12), "b",
       "hole"},
      {"trailing bytes", RawFile("{" + Entry("a", "\"F32\"", "[1]", "[0, 4]") + "}", 9), "a",
       "5 trailing bytes"},
      {"duplicate name",
       RawFile("{" + Entry("d", "\"F32\"", "[1]", "[0, 4]") + ", " +
                   Entry("d", "\"F32\"", "[1]", "[4, 8]") + "}",
               8),
       "d", "appears twice"},
      {"metadata not strings", RawFile(R"({"__metadata__": {"k": 1}})", 0), "",
       "__metadata__ value for \"k\""},
      {"metadata not object", RawFile(R"({"__metadata__": [1]})", 0), "",
       "__metadata__ must be an object"},
  };
}

TEST(SafetensorsHostileTest, EveryCorruptionIsANamedError) {
  const std::string dir = MakeTempDir();
  for (const HostileCase& c : HostileCases()) {
    const std::string path = dir + "/hostile.safetensors";
    ASSERT_TRUE(WriteStringToFile(path, c.contents).ok());
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << c.what;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(file.status().message(), HasSubstr(path)) << c.what;
    if (std::string(c.tensor).empty()) {
      EXPECT_THAT(file.status().message(), ::testing::Not(HasSubstr(": tensor "))) << c.what;
    } else {
      EXPECT_THAT(file.status().message(), HasSubstr(absl::StrCat(": tensor ", c.tensor, ":")))
          << c.what;
    }
    EXPECT_THAT(file.status().message(), HasSubstr(c.detail)) << c.what;
  }
}

TEST(SafetensorsHostileTest, MissingFileIsNotFound) {
  auto file = SafetensorsFile::Open(MakeTempDir() + "/absent.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("absent.safetensors"));
}

TEST(SafetensorsHostileTest, DirectoryAndFifoAreRejected) {
  const std::string dir = MakeTempDir();
  auto file = SafetensorsFile::Open(dir);
  EXPECT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr(dir));
  const std::string fifo = dir + "/pipe.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = SafetensorsFile::Open(fifo);  // must not block waiting for a writer
  EXPECT_EQ(from_fifo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(from_fifo.status().message(), HasSubstr("not a regular file"));
}

// Checks that whatever a mutated file parses to stays inside the mapping and is self-consistent.
void CheckParsed(const SafetensorsFile& file) {
  for (const auto& [name, t] : file.tensors()) {
    ASSERT_EQ(t.nbytes, static_cast<size_t>(t.numel()) * DTypeSize(t.dtype)) << name;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < t.nbytes; ++i) sink = sink ^ t.data[i];
    if (t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16) {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      ASSERT_TRUE(ConvertToF32(t, out.data()).ok());
    }
  }
}

TEST(SafetensorsFuzzTest, RandomFlipsAndTruncationsNeverCrash) {
  SafetensorsWriter w;
  ASSERT_TRUE(w.AddF32("model.layers.0.weight", {3, 2}, std::vector<float>(6, 0.5f)).ok());
  const std::vector<uint16_t> h = {1, 2, 3};
  ASSERT_TRUE(w.Add("half", DType::kF16, {3}, Bytes(h.data(), 6)).ok());
  ASSERT_TRUE(w.Add("bf", DType::kBF16, {1, 3}, Bytes(h.data(), 6)).ok());
  w.SetMetadata("format", "pt");
  const std::string valid = w.Serialize();
  const std::string dir = MakeTempDir();
  std::mt19937 rng(12345);
  int parsed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = valid;
    const int mode = static_cast<int>(rng() % 4);
    if (mode == 0) {
      bytes.resize(rng() % (valid.size() + 1));
    } else if (mode == 1) {
      const uint64_t len = rng() % (valid.size() + 64);
      std::memcpy(bytes.data(), &len, 8);
    } else {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        // Mostly inside the header, where the structure lives.
        const size_t limit = mode == 2 ? std::min<size_t>(bytes.size(), 160) : bytes.size();
        bytes[rng() % limit] = static_cast<char>(rng() & 0xff);
      }
    }
    // A fresh file each time: rewriting one in place makes ext4 flush it on every close.
    const std::string path = absl::StrCat(dir, "/fuzz", iter, ".safetensors");
    ASSERT_TRUE(WriteStringToFile(path, bytes).ok());
    auto file = SafetensorsFile::Open(path);
    unlink(path.c_str());  // the mapping outlives the name
    if (!file.ok()) {
      EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
      EXPECT_THAT(file.status().message(), HasSubstr(path));
      continue;
    }
    ++parsed;
    CheckParsed(**file);
  }
  EXPECT_GT(parsed, 0);  // some mutations (e.g. data bytes) leave a valid file
}

}  // namespace
}  // namespace strata
