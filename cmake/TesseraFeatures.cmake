# What the build compiled in (CUDA, NCCL, MPI) and where its source tree is,
# as two generated headers in build/generated/ (tessera_features.hpp,
# tessera_source_dir.hpp) that only the files which ask include, rather than
# definitions on every compile line. Every other object then compiles from the
# same command with or without a CUDA toolkit, in any clone, so one ccache
# serves this machine's build and the bare Debian's of CI
# (scripts/bare-debian-check.sh). Installed consumers get the three features
# as definitions (find_package(Tessera)), as before. Included once NCCL is
# decided (distribution/CMakeLists.txt).
set(TESSERA_HAVE_NCCL OFF)
if(TARGET tessera_nccl)
  set(TESSERA_HAVE_NCCL ON)
endif()
set(TESSERA_GENERATED_DIR ${PROJECT_BINARY_DIR}/generated)
configure_file(${PROJECT_SOURCE_DIR}/cmake/tessera_features.hpp.in ${TESSERA_GENERATED_DIR}/tessera_features.hpp)
configure_file(${PROJECT_SOURCE_DIR}/cmake/tessera_source_dir.hpp.in ${TESSERA_GENERATED_DIR}/tessera_source_dir.hpp)
target_include_directories(tessera PUBLIC $<BUILD_INTERFACE:${TESSERA_GENERATED_DIR}>)
foreach(name IN LISTS TESSERA_FLOORS)
  target_include_directories(tessera_${name} PRIVATE ${TESSERA_GENERATED_DIR})
endforeach()
foreach(feature CUDA NCCL MPI)
  target_compile_definitions(tessera INTERFACE
    $<INSTALL_INTERFACE:TESSERA_HAVE_${feature}=$<BOOL:${TESSERA_HAVE_${feature}}>>)
endforeach()
