# Install rules: `cmake --install build --prefix P` puts libtessera.a in P/lib,
# the public headers in P/include/tessera/{engine,backends,layers,distribution,testing}/, the
# `tessera` program in P/bin, and a CMake package in P/lib/cmake/Tessera, so a
# project can `find_package(Tessera)` and link `Tessera::tessera`
# (examples/ is one). Included at the end of the top-level
# CMakeLists.txt, once every subdirectory has added its sources and links.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The headers include one another as "engine/core/tensor.hpp" (relative to the
# source root), so consumers get both include/ (for <tessera/engine/...>) and
# include/tessera/ (for those inner includes).
target_include_directories(tessera PUBLIC
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/tessera>)

# The CUDA kernels' objects are inside libtessera.a already (the OBJECT library
# is added to tessera's sources), so the archive is all there is to install.
install(TARGETS tessera EXPORT TesseraTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir engine backends layers distribution testing)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera/${dir}
    FILES_MATCHING PATTERN "*.hpp")
endforeach()

set(TESSERA_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
install(EXPORT TesseraTargets NAMESPACE Tessera:: DESTINATION ${TESSERA_CONFIG_DIR})

# A static library's PRIVATE links still reach its consumers (as
# $<LINK_ONLY:...> in TesseraTargets.cmake), so TesseraConfig.cmake must find
# every package whose imported targets tessera links. The list below is the
# one TesseraConfig.cmake.in knows; a link to any other imported target stops
# the configure here, before it can ship a package that fails to load.
set(_tessera_known_links DNNL::dnnl yaml-cpp yaml-cpp::yaml-cpp fmt::fmt OpenMP::OpenMP_CXX
    ZLIB::ZLIB nlohmann_json::nlohmann_json CUDA::cudart CUDA::cublas CUDA::cublasLt MPI::MPI_CXX tessera_nccl)
get_target_property(_tessera_links tessera LINK_LIBRARIES)
set(TESSERA_LINKS_NLOHMANN_JSON OFF)
foreach(lib IN LISTS _tessera_links)
  if(lib STREQUAL "nlohmann_json::nlohmann_json")
    set(TESSERA_LINKS_NLOHMANN_JSON ON)
  endif()
  if(TARGET "${lib}" AND NOT lib IN_LIST _tessera_known_links)
    get_target_property(_imported "${lib}" IMPORTED)
    if(_imported)
      message(FATAL_ERROR "tessera links ${lib}, which cmake/TesseraConfig.cmake.in does not find "
                          "for the installed package: add its find_dependency() there and the "
                          "target to _tessera_known_links in cmake/TesseraInstall.cmake")
    endif()
  endif()
endforeach()
set(TESSERA_CUDA_TOOLKIT_ROOT "")
if(TESSERA_HAVE_CUDA)
  get_filename_component(TESSERA_CUDA_TOOLKIT_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TesseraConfig.cmake.in
  ${PROJECT_BINARY_DIR}/TesseraConfig.cmake
  INSTALL_DESTINATION ${TESSERA_CONFIG_DIR})
# 0.x releases: only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TesseraConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TesseraConfig.cmake ${PROJECT_BINARY_DIR}/TesseraConfigVersion.cmake
  DESTINATION ${TESSERA_CONFIG_DIR})
