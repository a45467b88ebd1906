# One translation unit per ISA level, each compiled with its own target flags. The rest of the
# project is built for baseline x86-64, so nothing outside these files can emit an instruction
# that the runtime dispatch has not checked the CPU and OS for.
set(INFERCAST_FLAGS_AVX2 -mavx2 -mfma -mf16c -mavxvnni)
set(INFERCAST_FLAGS_AVX512 -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq
    -mavx512vnni -mavx512bf16 -mprefer-vector-width=512)
# GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_* feeds the uninitialized warnings).
list(APPEND INFERCAST_FLAGS_AVX512 -Wno-maybe-uninitialized -Wno-uninitialized)
set(INFERCAST_FLAGS_AMX ${INFERCAST_FLAGS_AVX512} -mamx-tile -mamx-int8 -mamx-bf16)

# infercast_isa_sources(<target> <level> <files...>): compile files for one ISA level.
function(infercast_isa_sources target level)
  target_sources(${target} PRIVATE ${ARGN})
  set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target}
    PROPERTIES COMPILE_OPTIONS "${INFERCAST_FLAGS_${level}}")
endfunction()
