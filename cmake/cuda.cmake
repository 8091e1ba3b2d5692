# The CUDA backend's toolchain: Hopper machine code only (sm_90a, so wgmma and setmaxnreg are
# available to the kernels), C++20, the static runtime. Included only when QWICK_CUDA is on.
set(CMAKE_CUDA_ARCHITECTURES OFF)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# CMake 3.25 predates nvcc's C++20 support: tell it the flag (CMake >= 3.26 knows it already).
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_CUDA_FLAGS_RELWITHDEBINFO "-O2 -g -lineinfo -DNDEBUG")

# The target machine code and language flags of every CUDA translation unit of ours (also given to
# tools/check_wgmma.sh, which compiles the wgmma kernels again to read ptxas's report).
set(QWICK_CUDA_CODE_FLAGS -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr)

# qwick_cuda_target(target): the flags every CUDA translation unit of ours is built with.
function(qwick_cuda_target target)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES OFF CUDA_SEPARABLE_COMPILATION OFF)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${QWICK_CUDA_CODE_FLAGS}
                               -Xcompiler=-Wall,-Wextra
                               $<$<BOOL:${QWICK_WERROR}>:-Werror=all-warnings -Xcompiler=-Werror>>)
endfunction()
