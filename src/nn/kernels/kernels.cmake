# The nn kernels: a scalar reference, a dispatcher, and one translation unit
# per SIMD target built from the same source (simd_kernels.inc) with its own
# flags. The flags are set per file so nothing else leaves baseline x86-64.
set(_k ${CMAKE_CURRENT_LIST_DIR})
target_sources(dnnlab_nn PRIVATE ${_k}/reference.cpp ${_k}/dispatch.cpp)
if(EMSCRIPTEN)
  # One wasm module holds one table: an engine rejects a whole module that
  # uses an instruction it lacks. So the table is an object library that each
  # module links: dnnlab_nn_wasm (SIMD128, every engine with SIMD) or
  # dnnlab_nn_wasm_relaxed (relaxed SIMD, whose FMA src/wasm/relaxed_simd.mjs
  # re-encodes after the link). dnnlab_nn itself leaves kWasmKernels undefined.
  foreach(_v IN ITEMS wasm wasm_relaxed)
    add_library(dnnlab_nn_${_v} OBJECT ${_k}/wasm_simd128.cpp)
    target_include_directories(dnnlab_nn_${_v} PRIVATE ${CMAKE_SOURCE_DIR}/src)
    target_compile_options(dnnlab_nn_${_v} PRIVATE -msimd128 -O3 -fno-math-errno -fwasm-exceptions)
  endforeach()
  target_compile_options(dnnlab_nn_wasm_relaxed PRIVATE -mrelaxed-simd)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  # HOST (the asan preset): the AVX-512 table only when the machine that
  # configures can run it. Under ASan + UBSan avx512.cpp costs 61 CPU s to
  # compile (avx2.cpp 20) and its code can only run on such a machine; the
  # release build keeps it everywhere, tested wherever the CPU has it.
  set(DNNLAB_AVX512_KERNELS ON CACHE STRING "Build the AVX-512 kernel table: ON, OFF or HOST")
  set(_avx512 ${DNNLAB_AVX512_KERNELS})
  if(_avx512 STREQUAL "HOST")
    set(_avx512 OFF)
    if(EXISTS /proc/cpuinfo)
      file(STRINGS /proc/cpuinfo _flags REGEX "^flags" LIMIT_COUNT 1)
      if(_flags MATCHES " avx512f( |$)" AND _flags MATCHES " avx512bw( |$)" AND
         _flags MATCHES " avx512dq( |$)" AND _flags MATCHES " avx512vl( |$)")
        set(_avx512 ON)
      endif()
    endif()
    message(STATUS "dnnlab: AVX-512 kernels for this host: ${_avx512}")
  endif()
  target_sources(dnnlab_nn PRIVATE ${_k}/avx2.cpp)
  if(_avx512)
    target_sources(dnnlab_nn PRIVATE ${_k}/avx512.cpp)
  else()
    target_compile_definitions(dnnlab_nn PRIVATE DNNLAB_NO_AVX512_KERNELS)
  endif()
  # -ffp-contract=fast: ISO C++ mode turns FMA contraction off in GCC, and the
  # micro-kernel is written as a*b + c.
  set(_simd_common "-O3;-ffp-contract=fast;-fno-math-errno")
  # GCC turns the short vector copy loops of im2col / col2im (16-float rows)
  # back into a memmove call per row, which cost more than the copies (10% of
  # a CIFAR-10-quick training step): keep them inline.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND _simd_common "-fno-tree-loop-distribute-patterns")
  endif()
  set_source_files_properties(${_k}/avx512.cpp PROPERTIES COMPILE_OPTIONS
    "-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mfma;${_simd_common}")
  set_source_files_properties(${_k}/avx2.cpp PROPERTIES COMPILE_OPTIONS
    "-mavx2;-mfma;${_simd_common}")
endif()
unset(_k)
