# QWICK_SANITIZE=ON: the whole build (library, tools, tests) runs under ASan + UBSan.
# UBSan is made fatal so that a test touching undefined behaviour fails instead of printing.
if(QWICK_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=address,undefined)
  # GCC 12's flow analysis reports false "may be used uninitialized" inside libstdc++ (std::regex,
  # std::function) once the sanitizers instrument it.
  add_compile_options($<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
endif()
