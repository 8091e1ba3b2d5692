// qwick serve in a build without cpp-httplib (src/CMakeLists.txt): says what is missing.
#include "cli/commands.h"
#include "core/error.h"

namespace qwick {

int cmd_serve(int, char**) {
  fail(
      "this qwick was built without the server: cpp-httplib was not found when it was configured "
      "(install libcpp-httplib-dev, see tools/deps.sh, and configure again)");
}

}  // namespace qwick
