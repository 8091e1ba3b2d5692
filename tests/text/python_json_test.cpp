// Python-compatible JSON and scalar text: json.dumps(ensure_ascii=False) separators, escapes and
// float repr, str() of scalars. Expected strings are what CPython 3 prints.
#include <gtest/gtest.h>

#include "core/error.h"
#include "text/python_json.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

TEST(PythonJson, FloatRepr) {
  const std::pair<double, const char*> table[] = {{0.0, "0.0"},
                                                  {-0.0, "-0.0"},
                                                  {2.0, "2.0"},
                                                  {350.5, "350.5"},
                                                  {0.1, "0.1"},
                                                  {1e-4, "0.0001"},
                                                  {1e-5, "1e-05"},
                                                  {1.5e-7, "1.5e-07"},
                                                  {1e15, "1000000000000000.0"},
                                                  {1e16, "1e+16"},
                                                  {1.25e16, "1.25e+16"},
                                                  {123456.789, "123456.789"},
                                                  {1e100, "1e+100"},
                                                  {-2.5e-300, "-2.5e-300"},
                                                  {0.30000000000000004, "0.30000000000000004"},
                                                  {9007199254740993.0, "9007199254740992.0"}};
  for (const auto& [value, expected] : table) EXPECT_EQ(python_float_repr(value), expected) << expected;
}

TEST(PythonJson, DumpsLikePython) {
  const ojson v = ojson::parse(
      R"({"b": [1, -2, 3.0, true, null], "a": {"x": "é \"q\" \\ \n\t\u0001\u007f <&>"}, "z": {}})");
  EXPECT_EQ(python_json_dumps(v), R"({"b": [1, -2, 3.0, true, null], "a": {"x": "é \"q\" \\ \n\t\u0001)"
                                  "\x7f"
                                  R"( <&>"}, "z": {}})");
  EXPECT_EQ(python_json_dumps(ojson::array()), "[]");
  EXPECT_EQ(python_json_dumps(ojson(18446744073709551615ull)), "18446744073709551615");
}

TEST(PythonJson, StrOfScalars) {
  EXPECT_EQ(python_str(ojson(true)), "True");
  EXPECT_EQ(python_str(ojson(nullptr)), "None");
  EXPECT_EQ(python_str(ojson(2.5)), "2.5");
  EXPECT_EQ(python_str(ojson(-7)), "-7");
  EXPECT_EQ(python_str(ojson("raw \"text\"")), "raw \"text\"");
  EXPECT_THROW(python_str(ojson::array()), Error);
}

}  // namespace
}  // namespace qwick
