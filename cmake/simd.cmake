# SIMD kernels live in their own translation units compiled for one instruction set each; the
# dispatcher picks one at run time from the CPU's features. Those files must include nothing but
# <immintrin.h>, <cstdint>, <cstddef> and plain-struct headers, so no inline function compiled with
# wider instructions can be merged into code that runs on an older CPU.
set(QWICK_AVX2_FLAGS -mavx2 -mfma -mf16c)
# GCC 12 flags its own AVX-512 intrinsic headers (_mm512_undefined_*) as uninitialized reads (clang,
# which builds the fuzz targets, has no -Wmaybe-uninitialized).
set(QWICK_AVX512_FLAGS -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c -Wno-uninitialized
    $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)

function(qwick_simd_sources)
  cmake_parse_arguments(ARG "" "" "AVX2;AVX512" ${ARGN})
  foreach(f IN LISTS ARG_AVX2)
    set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${QWICK_AVX2_FLAGS}")
  endforeach()
  foreach(f IN LISTS ARG_AVX512)
    set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "${QWICK_AVX512_FLAGS}")
  endforeach()
endfunction()
