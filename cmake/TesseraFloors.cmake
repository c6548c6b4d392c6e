# Tessera's floors (scripts/floors.txt; ARCHITECTURE.md draws them) as CMake
# targets: one OBJECT library per floor of the library, tessera_<name>, each
# linked to the floor below it and compiled against the headers of its own
# floor and of the floors below only. Each floor's headers are staged here as
# symbolic links under their source paths (build/floors/<name>/engine/...), and
# a floor's include path holds its own stage and, through its links, those
# below: an include that points up names a file the compiler cannot find, and
# the build fails at that line. The floors' objects make up the one tessera
# library (tessera_floors_finish, called once every folder added its sources).
#
# scripts/check-floors.sh reads the same list; it also keeps a folder's
# private detail.hpp to itself and names every offending include at once.

file(STRINGS ${PROJECT_SOURCE_DIR}/scripts/floors.txt _tessera_floor_lines REGEX "^[0-9]")
# An edit of the list reconfigures (and restages) on the next build.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/scripts/floors.txt)
set(_tessera_stage ${PROJECT_BINARY_DIR}/floors)
file(REMOVE_RECURSE ${_tessera_stage})  # headers deleted since the last configure leave no link behind

# Every header of the library, by source path.
file(GLOB_RECURSE _tessera_headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
     ${PROJECT_SOURCE_DIR}/engine/*.hpp ${PROJECT_SOURCE_DIR}/backends/*.hpp
     ${PROJECT_SOURCE_DIR}/layers/*.hpp ${PROJECT_SOURCE_DIR}/distribution/*.hpp)

# The floors in order, each with its path prefixes ("name:prefix").
set(TESSERA_FLOORS "")
set(_tessera_prefixes "")
foreach(line IN LISTS _tessera_floor_lines)
  string(REGEX REPLACE "[ \t]+" ";" fields "${line}")
  list(POP_FRONT fields number name)
  if(name STREQUAL "bin")  # programs, not the library: they see every floor
    continue()
  endif()
  list(APPEND TESSERA_FLOORS ${name})
  foreach(prefix IN LISTS fields)
    list(APPEND _tessera_prefixes "${name}:${prefix}")
  endforeach()
endforeach()

# Stage each header in its floor (the longest matching prefix, as the check does).
foreach(header IN LISTS _tessera_headers)
  set(best "")
  set(best_length 0)
  foreach(entry IN LISTS _tessera_prefixes)
    string(FIND "${entry}" ":" colon)
    string(SUBSTRING "${entry}" 0 ${colon} name)
    math(EXPR start "${colon} + 1")
    string(SUBSTRING "${entry}" ${start} -1 prefix)
    string(LENGTH "${prefix}" length)
    string(FIND "${header}" "${prefix}" at)
    if(at EQUAL 0 AND length GREATER best_length)
      set(best ${name})
      set(best_length ${length})
    endif()
  endforeach()
  if(best STREQUAL "")
    message(FATAL_ERROR "${header} belongs to no floor: add its folder to scripts/floors.txt")
  endif()
  get_filename_component(folder "${_tessera_stage}/${best}/${header}" DIRECTORY)
  file(MAKE_DIRECTORY ${folder})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${header} ${_tessera_stage}/${best}/${header} SYMBOLIC)
endforeach()

set(_tessera_below "")
foreach(name IN LISTS TESSERA_FLOORS)
  add_library(tessera_${name} OBJECT)
  file(MAKE_DIRECTORY ${_tessera_stage}/${name})
  target_include_directories(tessera_${name} PUBLIC ${_tessera_stage}/${name})
  if(_tessera_below)
    target_link_libraries(tessera_${name} PUBLIC tessera_${_tessera_below})
  endif()
  # -fno-math-errno: std::sqrt and friends may then vectorise (nothing reads errno).
  target_compile_options(tessera_${name} PRIVATE ${TESSERA_WARNINGS} $<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>)
  target_sources(tessera PRIVATE $<TARGET_OBJECTS:tessera_${name}>)
  set(_tessera_below ${name})
endforeach()
set_target_properties(tessera PROPERTIES LINKER_LANGUAGE CXX)

# The headers a floor's objects compile against: `floor`'s stage and those below.
function(tessera_floor_includes target floor)
  foreach(name IN LISTS TESSERA_FLOORS)
    target_include_directories(${target} PRIVATE ${_tessera_stage}/${name})
    if(name STREQUAL floor)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "no floor named ${floor}")
endfunction()

# Once every folder added its sources and tessera its links: each floor
# compiles with the packages tessera links (for their headers and flags), but
# CUDA's and NCCL's headers, which go only to the sources that include them
# (tessera_cuda_headers, cmake/TesseraCuda.cmake).
function(tessera_floors_finish)
  get_target_property(links tessera LINK_LIBRARIES)
  list(FILTER links EXCLUDE REGEX "^(CUDA::.*|tessera_nccl)$")
  foreach(name IN LISTS TESSERA_FLOORS)
    target_link_libraries(tessera_${name} PRIVATE ${links})
  endforeach()
endfunction()
