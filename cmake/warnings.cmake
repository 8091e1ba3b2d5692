# Warnings are errors for our own code; third-party headers come in as SYSTEM includes.
add_library(qwick_warnings INTERFACE)
target_compile_options(qwick_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wcast-align -Wunused
                            -Woverloaded-virtual -Wformat=2 $<$<BOOL:${QWICK_WERROR}>:-Werror>>)
