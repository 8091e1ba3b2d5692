// The safetensors reader accepts well-formed files and rejects each kind of malformed one with a
// message naming the fault (and never crashes: the fuzz target in fuzz/ drives the same code).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace qwick {
namespace {

std::vector<uint8_t> image(const std::string& header, size_t data_bytes, uint64_t declared_len = UINT64_MAX) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t len = declared_len == UINT64_MAX ? header.size() : declared_len;
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(len >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::parse(bytes, "test.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, ParsesTensorsAndMetadata) {
  const auto bytes = image(
      R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
      R"("__metadata__":{"format":"pt"}})",
      22);
  const auto f = SafetensorsFile::parse(bytes, "x");
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorInfo* b = f->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kBF16);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(b->nbytes, 6u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->find("c"), nullptr);
}

TEST(Safetensors, AcceptsEmptyAndScalarTensors) {
  const auto bytes = image(
      R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})",
      4);
  const auto f = SafetensorsFile::parse(bytes, "x");
  EXPECT_EQ(f->find("s")->numel(), 1);
  EXPECT_EQ(f->find("e")->numel(), 0);
}

struct BadCase {
  const char* what;
  std::vector<uint8_t> bytes;
  const char* expect;  // substring of the error message
};

TEST(Safetensors, RejectsMalformedFilesWithClearErrors) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::vector<BadCase> cases = {
      {"too short", {1, 2, 3}, "too short"},
      {"header length over the bound", image("{}", 0, 200'000'000), "exceeds"},
      {"header past the end", image("{}", 0, 50), "past the end"},
      {"not JSON", image("{\"a\":", 0), "not valid JSON"},
      {"no opening brace", image("[1]", 0), "does not start"},
      {"duplicate key", image("{" + ok_entry + "," + ok_entry + "}", 8), "duplicate key \"a\""},
      {"unknown dtype", image(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8),
       "unknown dtype \"Q4\""},
      {"negative dim", image(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       "invalid dimension"},
      {"shape not array", image(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8),
       "no shape array"},
      {"reversed offsets", image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), "reversed"},
      {"offsets past data", image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
       "run past"},
      {"size mismatch", image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "span 8 bytes"},
      {"overflowing shape",
       image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})", 8),
       "overflows"},
      {"overlap",
       image(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           12),
       "overlaps"},
      {"hole", image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "unused bytes"},
      {"trailing bytes", image("{" + ok_entry + "}", 12), "cover 8"},
      {"metadata not strings", image(R"({"__metadata__":{"x":1}})", 0), "not a string"},
      {"entry not object", image(R"({"a":[1,2]})", 0), "not an object"},
      {"bad offsets", image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
       "invalid data_offsets"},
      {"invalid utf-8 in header", image("{\"\xff\":1}", 0), "not valid JSON"},
  };
  for (const auto& c : cases) {
    const std::string err = parse_error(c.bytes);
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": got \"" << err << "\"";
    EXPECT_NE(err.find("test.safetensors"), std::string::npos) << c.what << ": message must name the file";
  }
}

TEST(Safetensors, WriterRoundTripsAndAlignsByElementSize) {
  const auto dir = test::scratch_dir("st_roundtrip");
  SafetensorsWriter w;
  w.add_bytes("b_half", DType::kBF16, {3}, {1, 2, 3, 4, 5, 6});
  w.add_bytes("a_word", DType::kU32, {2}, {9, 9, 9, 9, 8, 8, 8, 8});
  w.add_bytes("c_byte", DType::kU8, {1}, {7});
  w.set_metadata("format", "pt");
  w.write((dir / "x.safetensors").string());
  const auto f = SafetensorsFile::open((dir / "x.safetensors").string());
  ASSERT_EQ(f->tensors().size(), 3u);
  const TensorInfo* a = f->find("a_word");
  const TensorInfo* b = f->find("b_half");
  EXPECT_EQ(a->data[0], 9);
  EXPECT_EQ(b->data[5], 6);
  EXPECT_EQ(f->find("c_byte")->data[0], 7);
  // Data starts 8-aligned and wider elements come first, so each tensor is aligned to its element.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 4, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % 2, 0u);
}

TEST(Safetensors, OpenReportsMissingFile) {
  try {
    SafetensorsFile::open("/nonexistent/model.safetensors");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.safetensors"), std::string::npos);
  }
}

}  // namespace
}  // namespace qwick
