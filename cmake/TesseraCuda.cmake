# Decides TESSERA_HAVE_CUDA from the TESSERA_CUDA option and the machine's toolkit.
# The toolkit's nvcc, cuBLAS, cuBLASLt and NCCL are used when present; the GPU code
# is built for sm_80 and sm_90 only, to keep builds short.
set(TESSERA_HAVE_CUDA OFF)
if(NOT TESSERA_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # the .so the library links anyway
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(TESSERA_HAVE_CUDA ON)
  elseif(TESSERA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_CUDA=ON but no CUDA compiler was found "
                        "(set CMAKE_CUDA_COMPILER or put nvcc on PATH)")
  endif()
endif()
message(STATUS "Tessera CUDA backend: ${TESSERA_HAVE_CUDA}")

# tessera_cuda_headers(TARGET SOURCE...): CUDA's headers for those sources of
# TARGET alone. Every other object compiles from the same command with or
# without a toolkit, so one ccache serves both (cmake/TesseraFeatures.cmake).
function(tessera_cuda_headers target)
  set(options "")
  # The math libraries' folder too where cuBLAS is not in the toolkit's own
  # (NVIDIA's HPC SDK), as FindCUDAToolkit gives CUDA::cublas.
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS CUDAToolkit_MATH_INCLUDE_DIR)
    list(APPEND options "-isystem${dir}")  # joined: a source property has no SHELL: form
  endforeach()
  set_property(SOURCE ${ARGN} TARGET_DIRECTORY ${target} APPEND PROPERTY COMPILE_OPTIONS ${options})
endfunction()
