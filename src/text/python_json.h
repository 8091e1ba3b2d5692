// JSON and scalar text exactly as Python writes them, for the chat template's `tojson` and
// `|string` (Hugging Face renders templates with Python's json.dumps(ensure_ascii=False)).
//
// python_json_dumps: separators ", " and ": ", keys in the order given (nlohmann::ordered_json
// keeps it), non-ASCII left as is, control characters escaped as Python does (\n, \t, \u001b,
// lowercase hex), floats as Python's repr (shortest round-trip digits, "2.0", "1e-05", "1e+16").
//
// Tested in tests/text/python_json_test.cpp (float repr table, escapes, nesting) and through the
// chat goldens (tools blocks, typed tool arguments).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace qwick {

std::string python_json_dumps(const nlohmann::ordered_json& value);

// Python's repr(float).
std::string python_float_repr(double value);

// Python's str() of a JSON scalar: strings as is, True/False, None, numbers as above.
// Throws Error for arrays and objects (their Python repr is not needed by the chat format).
std::string python_str(const nlohmann::ordered_json& value);

}  // namespace qwick
