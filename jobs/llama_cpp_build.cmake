# Read by CMake after each project() of llama.cpp's tree (CMAKE_PROJECT_INCLUDE, set by jobs/llama_cpp.sh).
#
# Why: the llama-server build runs beside the test suite on two cores, and most of its compile time goes to code that
# does no per-token work: argument parsing, chat templates and parsers, multimodal, HTTP and JSON. At the end of the
# top directory those targets are compiled at -O0 instead of Release's -O3, and the common library and the server in
# unity batches (measured on an AVX-512 EPYC: the build's CPU time 560 s -> 466 s at -O1 -> 347 s with the batches
# -> 326 s with libllama's loader and architectures at -O1 and multimodal at -O0, against 366 s measured beside it the
# same day; the same answers, at the same tok/s; 362 s -> 319 s with multimodal's encoders in batches too; 335 s ->
# 280 s, and 342 s -> 300 s with both built at once, with -O0 for what was at -O1 and batches of 24, on an AMD EPYC
# with avx2 avx512f avx512_bf16, 2 cores: the same answers, 7 passed in test_llama_cpp_cpu, 78-82 tok/s both at -t 1).
# Kept at -O3: ggml (every matrix product), libllama's per-token sources (context, batch, KV cache, graph, sampling,
# vocabulary) and those of the common library (sampling, speculative drafting, n-gram lookup); at -O1 what can run
# at every token with other models or options (grammar, unicode, the other KV caches and recurrent memories). A
# target this llama.cpp version does not have is skipped; with a CMake older than 3.20 (no DEFER, no cmake_path)
# everything stays at -O3.
if(CMAKE_VERSION VERSION_LESS 3.20)
  return()
endif()
get_property(_specbatch_deferred GLOBAL PROPERTY SPECBATCH_LIGHTER_TARGETS)
if(NOT _specbatch_deferred)
  set_property(GLOBAL PROPERTY SPECBATCH_LIGHTER_TARGETS TRUE)
  function(_specbatch_lighter_targets)
    foreach(target llama llama-common server-context llama-server-impl llama-server cpp-httplib llama-ui)
      if(TARGET ${target})
        # Target options come after the configuration's -O3 on the command line, so this one wins ...
        target_compile_options(${target} PRIVATE -O0)
      endif()
    endforeach()
    # Multimodal input is never used here (text models only): not optimised at all.
    if(TARGET mtmd)
      target_compile_options(mtmd PRIVATE -O0)
      # Its fifty encoders (models/*.cpp) are small files behind the same heavy headers: compiled a batch at a time
      # like the targets below; the rest of it, its helper included, one file each.
      set_target_properties(mtmd PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
      get_target_property(dir mtmd SOURCE_DIR)
      get_target_property(sources mtmd SOURCES)
      foreach(source IN LISTS sources)
        if(NOT source MATCHES "(^|/)models/[^/]*\\.cpp$")
          cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${dir}")
          set_source_files_properties("${source}" DIRECTORY "${dir}" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
        endif()
      endforeach()
    endif()
    if(TARGET llama)
      # libllama at -O0 is its model loader, quantiser and the graph builders of 150 architectures (a graph is
      # reused from one token to the next); what runs at every token stays at -O3, or -O1 when it runs only with
      # another model or a grammar (a source file's options come after the target's).
      get_target_property(dir llama SOURCE_DIR)
      foreach(source llama-sampler llama-context llama-batch llama-kv-cache llama-graph llama-vocab)
        set_source_files_properties("${dir}/${source}.cpp" DIRECTORY "${dir}" PROPERTIES COMPILE_OPTIONS -O3)
      endforeach()
      foreach(source llama-grammar unicode unicode-data llama-hparams llama-cparams llama-memory llama-memory-recurrent
                     llama-memory-hybrid llama-memory-hybrid-iswa llama-memory-hybrid-idx llama-kv-cache-iswa
                     llama-kv-cache-dsa llama-kv-cache-dsa-iswa llama-kv-cache-msa llama-kv-cache-dsv4)
        set_source_files_properties("${dir}/${source}.cpp" DIRECTORY "${dir}" PROPERTIES COMPILE_OPTIONS -O1)
      endforeach()
    endif()
    # Most of the compile time of the common library and the server is the front end reading the same heavy headers
    # (JSON, chat templates) once per source file: compiled a few files at a time (CMake's unity build), each header
    # is read once a batch. (mtmd's own batches are above: its helper refuses to be compiled with its internals.)
    foreach(target llama-common server-context llama-server-impl)
      if(TARGET ${target})
        set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 24)
      endif()
    endforeach()
    if(TARGET llama-common)
      # ... and a source file's options come after the target's.
      get_target_property(dir llama-common SOURCE_DIR)
      get_target_property(sources llama-common SOURCES)
      foreach(source IN LISTS sources)
        if(source MATCHES "(sampling|speculative|ngram)[^/]*\\.cpp$")
          # A relative name would be read against the top directory, not the target's.
          cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${dir}")
          set_source_files_properties(
            "${source}" DIRECTORY "${dir}" PROPERTIES COMPILE_OPTIONS -O3 SKIP_UNITY_BUILD_INCLUSION ON)
        endif()
      endforeach()
      # Its JSON wrapper specialises templates that other files use: compiled on its own, whatever comes before it.
      set_source_files_properties("${dir}/json.cpp" DIRECTORY "${dir}" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endfunction()
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _specbatch_lighter_targets)
endif()
