# The nn kernels: a scalar reference, a dispatcher, and one translation unit
# per SIMD target built from the same source (simd_kernels.inc) with its own
# flags. The flags are set per file so nothing else leaves baseline x86-64.
set(_k ${CMAKE_CURRENT_LIST_DIR})
target_sources(dnnlab_nn PRIVATE ${_k}/reference.cpp ${_k}/dispatch.cpp)
if(EMSCRIPTEN)
  target_sources(dnnlab_nn PRIVATE ${_k}/wasm_simd128.cpp)
  set_source_files_properties(${_k}/wasm_simd128.cpp PROPERTIES
    COMPILE_OPTIONS "-msimd128;-O3;-fno-math-errno")
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  target_sources(dnnlab_nn PRIVATE ${_k}/avx512.cpp ${_k}/avx2.cpp)
  # -ffp-contract=fast: ISO C++ mode turns FMA contraction off in GCC, and the
  # micro-kernel is written as a*b + c.
  set(_simd_common "-O3;-ffp-contract=fast;-fno-math-errno")
  set_source_files_properties(${_k}/avx512.cpp PROPERTIES COMPILE_OPTIONS
    "-mavx512f;-mavx512bw;-mavx512dq;-mavx512vl;-mfma;${_simd_common}")
  set_source_files_properties(${_k}/avx2.cpp PROPERTIES COMPILE_OPTIONS
    "-mavx2;-mfma;${_simd_common}")
endif()
unset(_k)
