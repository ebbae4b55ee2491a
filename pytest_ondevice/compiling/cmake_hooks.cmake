# Made part of a CMake project by pytest-ondevice (CMAKE_PROJECT_INCLUDE): at the end of the
# top-level directory, when every target exists, each executable that links a test framework
# pytest-ondevice reads gets that framework's hook (its verdicts stamped with a per-run
# nonce, so that a test printing the framework's own pass lines proves nothing).
# ONDEVICE_HOOKS: a list of REGEX=SOURCE pairs, the regex matched against the target's
# LINK_LIBRARIES.
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _ondevice_link_hooks)

function(_ondevice_targets dir out)
  get_property(found DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _ondevice_targets("${sub}" more)
    list(APPEND found ${more})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

function(_ondevice_link_hooks)
  _ondevice_targets("${CMAKE_SOURCE_DIR}" targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(imported ${target} IMPORTED)
    if(NOT type STREQUAL "EXECUTABLE" OR imported)
      continue()
    endif()
    get_target_property(libs ${target} LINK_LIBRARIES)
    foreach(pair IN LISTS ONDEVICE_HOOKS)
      string(FIND "${pair}" "=" eq)
      string(SUBSTRING "${pair}" 0 ${eq} pattern)
      math(EXPR from "${eq} + 1")
      string(SUBSTRING "${pair}" ${from} -1 source)
      if(libs MATCHES "${pattern}")
        target_sources(${target} PRIVATE "${source}")
        break()
      endif()
    endforeach()
  endforeach()
endfunction()
